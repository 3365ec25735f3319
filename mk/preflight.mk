# qwen-npu preflight: its benchmark. The tests need nothing beyond .venv (make test runs them).
#   make perf-preflight   time preflight on a 397B-A17B-sized synthetic checkpoint -> out/perf/preflight.md

.PHONY: perf-preflight

perf-preflight: $(STAMP) ## time qwen-npu preflight on a 397B-sized checkpoint (out/perf/preflight.md)
	@mkdir -p $(OUT)/perf
	$(BIN)/python -m tools.perf.preflight --out $(OUT)/perf/preflight.md

PERF_TARGETS += perf-preflight
