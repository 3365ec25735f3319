# The SGLang-protocol simulator (qwen-npu sim): run it in the foreground, measure it.
# PROFILE names a latency profile under qwen_npu/sim/profiles/ (make sim PROFILE=fast-test,
# or PROFILE=qwen3.6-35b-a3b-910b-tp2-nomtp for the same pool with MTP off);
# SIM_ARGS passes any other flag (make sim SIM_ARGS="--ttft-ms 80 --garbled").

PROFILE ?= qwen3.6-35b-a3b-910b-tp2-mtp
SIM_PORT ?= 30000
SIM_ARGS ?=

.PHONY: sim sim-profiles perf-sim

sim: $(STAMP) ## run the simulator in the foreground (PROFILE=<name>, SIM_PORT=30000, SIM_ARGS=...)
	$(BIN)/qwen-npu sim --profile $(PROFILE) --port $(SIM_PORT) $(SIM_ARGS)

sim-profiles: $(STAMP) ## list the simulator's latency profiles
	@$(BIN)/qwen-npu sim --list-profiles

perf-sim: $(STAMP) ## simulator fidelity (CONC 1/10/64), capacity and MTP calibration vs upstream (out/perf/sim.md)
	@mkdir -p $(OUT)/perf
	$(BIN)/python -m tools.perf.sim --out $(OUT)/perf/sim.md

PERF_TARGETS += perf-sim
# The simulator's /metrics test runs promtool (tools-prometheus, mk/tools.mk) for real.
TEST_DEPS += tools-prometheus
