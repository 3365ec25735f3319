# The health and metrics sidecar (qwen-npu sidecar): run it, measure it.
# `make sidecar` runs it in the foreground against TARGET (an engine URL); without TARGET it
# starts the simulator first (on its default port, the sidecar's default engine URL: the port
# numbers live in qwen_npu/ports.py alone) and stops it again when the sidecar stops.
# SIDECAR_ARGS passes any other flag (make sidecar SIDECAR_ARGS="--state-dir /tmp/state").

SIDECAR_PORT ?=
SIDECAR_ARGS ?=
# TARGET given on the command line or in the environment; a default from another mk file does not
# count.
SIDECAR_TARGET = $(if $(filter command line environment environment override,$(origin TARGET)),$(TARGET),)

.PHONY: sidecar perf-sidecar

sidecar: $(STAMP) ## run the sidecar on 127.0.0.1:SIDECAR_PORT against TARGET (default: a local simulator)
	@set -euo pipefail; \
	target="$(SIDECAR_TARGET)"; sim_pid=""; \
	if [ -z "$$target" ]; then \
		echo ">> no TARGET: starting the simulator on its default port (make sidecar TARGET=<engine URL> to skip)"; \
		$(BIN)/qwen-npu sim --host 127.0.0.1 & sim_pid=$$!; \
		trap 'kill $$sim_pid 2>/dev/null || true' EXIT INT TERM; \
	fi; \
	echo ">> sidecar (/startupz /readyz /livez /status /metrics) -> $${target:-the local engine}"; \
	$(BIN)/qwen-npu sidecar --host 127.0.0.1 $(if $(SIDECAR_PORT),--port $(SIDECAR_PORT)) \
		$${target:+--engine-url "$$target"} $(SIDECAR_ARGS)

perf-sidecar: $(STAMP) ## p99 of /readyz and /metrics at 200 req/s, RSS over hours of scrapes (out/perf/sidecar.md)
	@mkdir -p $(OUT)/perf
	$(BIN)/python -m tools.perf.sidecar --out $(OUT)/perf/sidecar.md

PERF_TARGETS += perf-sidecar
# The sidecar's tests run promtool (tools-prometheus, mk/tools.mk) for real.
TEST_DEPS += tools-prometheus
