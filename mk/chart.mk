# The Helm chart (helm/qwen-npu): lint and render with Helm's own Go SDK (helm-python-sdk, in .venv),
# package it, regenerate values.schema.json from values.yaml, and checkov in its own venv.
#
#   make chart                 lint + render every profile and ci/ overlay to out/chart/
#   make chart-package         helm package -> out/chart/qwen-npu-<version>.tgz
#   make chart-schema          regenerate helm/qwen-npu/values.schema.json from values.yaml
#   make checkov               run checkov on the rendered manifests (installs .venv-checkov first)
#
# checkov pins dozens of packages that clash with .venv's, so it lives in .venv-checkov.

CHART_DIR := helm/qwen-npu
CHART_OUT := $(OUT)/chart
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-$(CHECKOV_VERSION)

# The renders the simulator's chart-backed profiles read ship in the package as data
# (qwen_npu/sim/profiles/chart-renders.json: the package does not render the chart); this rewrites
# them after a chart or profile change (tests/helm/test_sim_renders.py fails until it is run).
.PHONY: sim-renders
sim-renders: $(STAMP) ## rewrite the simulator's packaged chart renders (after a chart or sim profile change)
	@$(BIN)/python -m tools.chart sim-renders

.PHONY: chart chart-package chart-schema checkov checkov-venv

chart: $(STAMP) ## lint the chart and render every profile and ci/ overlay to out/chart/
	$(BIN)/python -m tools.chart render --out $(CHART_OUT)

chart-package: $(STAMP) ## package the chart to out/chart/
	$(BIN)/python -m tools.chart package --out $(CHART_OUT)

chart-schema: $(STAMP) ## regenerate the chart's values.schema.json from values.yaml
	$(BIN)/python $(CHART_DIR)/hack/gen_schema.py

checkov-venv: $(CHECKOV_STAMP) ## install the pinned checkov in its own venv (.venv-checkov)

$(CHECKOV_STAMP):
	@echo ">> creating $(CHECKOV_VENV) with checkov==$(CHECKOV_VERSION)"
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	@$(CHECKOV_VENV)/bin/python -m pip --disable-pip-version-check install -q --progress-bar off checkov==$(CHECKOV_VERSION) $(QUIET_PIP)
	@$(CHECKOV_VENV)/bin/checkov --version >/dev/null || { echo "checkov-venv: checkov does not run; see the pip output above"; exit 1; }
	@touch $@

checkov: $(STAMP) $(CHECKOV_STAMP) chart ## checkov (--skip-download) on every rendered manifest
	$(CHECKOV_VENV)/bin/checkov --quiet --compact --skip-download --framework kubernetes -d $(CHART_OUT)

TEST_DEPS += $(CHECKOV_STAMP)

.PHONY: autoscaling
autoscaling: $(STAMP) tools-prometheus ## KEDA's decisions on live signals: Prometheus + 2 simulators + the bench (out/perf/autoscaling.md)
	$(BIN)/python -m tools.proofs.autoscaling
PERF_TARGETS += autoscaling

