# Dashboards and alert rules as code (qwen_npu/observability -> helm/qwen-npu/files/).
# `make dashboards` regenerates the committed files (a test fails when they are stale);
# `make lint-observability` runs promtool on the rules exactly as the chart renders them.
# The tests need promtool and prometheus: tools-prometheus is already in TEST_DEPS (mk/tools.mk).

OBS_OUT := $(OUT)/observability

.PHONY: dashboards lint-observability

dashboards: $(STAMP) ## regenerate the Grafana dashboards and alert rules under helm/qwen-npu/files/
	$(BIN)/qwen-npu dashboards --out helm/qwen-npu/files

lint-observability: $(STAMP) tools-prometheus ## promtool check rules on the chart's rendered PrometheusRule
	$(BIN)/qwen-npu dashboards --check --out helm/qwen-npu/files
	$(BIN)/qwen-npu dashboards --render-rules $(OBS_OUT)/qwen-npu-alerts.yaml --chart helm/qwen-npu
	promtool check rules $(OBS_OUT)/qwen-npu-alerts.yaml
