# The SGLang-protocol simulator (qwen-npu sim): run it in the foreground, measure it.
# SIM_PROFILE names a latency profile under qwen_npu/sim/profiles/ (make sim SIM_PROFILE=fast-test,
# or SIM_PROFILE=qwen3.6-35b-a3b-910b-tp2-nomtp for the same pool with MTP off); mtp-tune
# (mk/loadtest.mk) starts its simulators from it too;
# SIM_ARGS passes any other flag (make sim SIM_ARGS="--ttft-ms 80 --garbled").

SIM_PROFILE ?= qwen3.6-35b-a3b-910b-tp2-mtp
# PROFILE meant the simulator's profile here and a chart profile file in `make fetch`; it is now
# SIM_PROFILE and CHART_PROFILE, and a PROFILE given to either verb is refused, not ignored.
refuse_old_profile = @$(if $(filter command line,$(origin PROFILE)),echo "make $@: PROFILE is not a variable of any verb; use $(1)"; exit 2,:)
SIM_PORT ?=
SIM_ARGS ?=

.PHONY: sim sim-profiles perf-sim

sim: $(STAMP) ## run the simulator in the foreground (SIM_PROFILE=<name>, SIM_PORT=<port>, SIM_ARGS=...)
	$(call refuse_old_profile,SIM_PROFILE=<name> (make sim-profiles lists them))
	$(BIN)/qwen-npu sim --profile $(SIM_PROFILE) $(if $(SIM_PORT),--port $(SIM_PORT)) $(SIM_ARGS)

sim-profiles: $(STAMP) ## list the simulator's latency profiles
	@$(BIN)/qwen-npu sim --list-profiles

perf-sim: $(STAMP) ## simulator fidelity (CONC 1/10/64), capacity and MTP calibration vs upstream (out/perf/sim.md)
	@mkdir -p $(OUT)/perf
	$(BIN)/python -m tools.perf.sim --out $(OUT)/perf/sim.md

PERF_TARGETS += perf-sim
# The simulator's /metrics test runs promtool (tools-prometheus, mk/tools.mk) for real.
TEST_DEPS += tools-prometheus
