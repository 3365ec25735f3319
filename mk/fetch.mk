# qwen-npu fetch: a checkpoint from ModelScope, Hugging Face, OBS or S3 to a directory, and its
# benchmark. The tests need nothing beyond .venv (make test runs tests/fetch).
#   make fetch MODEL=modelscope://org/name[@revision] DEST=/models/name [CHART_PROFILE=helm/qwen-npu/profiles/<p>.yaml]
# CHART_PROFILE is a chart profile file (its engine args judge the download); the simulator's
# SIM_PROFILE (mk/sim.mk) is a latency profile name: two things, two names.
#   make perf-fetch   throughput, CPU per GB, peak RSS, re-verify time -> out/perf/fetch.md

.PHONY: fetch perf-fetch

FETCH_ARGS ?=

fetch: $(STAMP) ## fetch a checkpoint: make fetch MODEL=hf://org/name DEST=dir [CHART_PROFILE=<profile.yaml>]
	$(call refuse_old_profile,CHART_PROFILE=helm/qwen-npu/profiles/<p>.yaml)
	@test -n "$(MODEL)" && test -n "$(DEST)" || { \
		echo "make fetch: set MODEL and DEST, e.g. make fetch MODEL=modelscope://org/name DEST=/models/name (docs/runbook.md 'Fetching a model')"; exit 2; }
	$(BIN)/qwen-npu fetch '$(MODEL)' '$(DEST)' $(if $(CHART_PROFILE),--profile '$(CHART_PROFILE)') $(FETCH_ARGS)

perf-fetch: $(STAMP) ## fetch throughput, CPU per GB, peak RSS, 35 GB re-verify (out/perf/fetch.md)
	@mkdir -p $(OUT)/perf
	$(BIN)/python -m tools.perf.fetch --out $(OUT)/perf/fetch.md

PERF_TARGETS += perf-fetch
