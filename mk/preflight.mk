# qwen-npu preflight: its benchmark. The tests need nothing beyond .venv (make test runs them).
#   make perf-preflight   time preflight on a 397B-A17B-sized synthetic checkpoint -> out/perf/preflight.md

.PHONY: perf-preflight

perf-preflight: $(STAMP) ## time qwen-npu preflight on a 397B-sized checkpoint (out/perf/preflight.md)
	@mkdir -p $(OUT)/perf
	PYTHONPATH=tests PERF_OUT=$(OUT)/perf $(BIN)/python tests/preflight/perf_preflight.py

PERF_TARGETS += perf-preflight
