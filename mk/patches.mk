# qwen-npu runtime patches (qwen_npu/patches, docs/patches.md).
#   make verify-patches   qwen-npu patches verify --strict against .venv's SGLang (part of make test)
#   make patches-pth      make sure .venv's site-packages holds the current qwen_npu_patches.pth
#   make check-wheel-pth  build the wheel, install it --no-deps in a throwaway venv, check the hook
#   make perf-patches     start-up cost of the .pth hook, the decision time, plain decode's traffic per route -> out/perf/patches.md
#   make sglang-candidate CANDIDATE=<x> | WHEEL=<path> [REPIN=1]
#                         what a new SGLang release changes, per patch and GDN contract link
#   make sglang-snapshot  write the pinned SGLang's sources (the base of sglang-candidate's diffs)
#
# On this CPU machine SGLang's Ascend backend imports sgl_kernel_npu; tests/stubs holds a stand-in
# (the engine image has the real one), hence PYTHONPATH=tests/stubs below.

PATCHES_PTH := qwen_npu/patches/qwen_npu_patches.pth
PATCHES_SITE = $(shell $(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
WHEEL_DIR := $(OUT)/wheel-check

.PHONY: verify-patches patches-pth check-wheel-pth perf-patches

patches-pth: $(STAMP)
	@cmp -s $(PATCHES_PTH) "$(PATCHES_SITE)/qwen_npu_patches.pth" || { \
		echo ">> reinstalling qwen-npu (editable) so .venv gets the current $(notdir $(PATCHES_PTH))"; \
		$(PIP) install -q --no-deps -e . $(QUIET_PIP); }

# verify-patches judges the chart's default deployment (VERIFY_PROFILE's engine command line, as the
# chart renders it: MTP on): strictness follows that mode, as at the engine's start. Off the NPU
# SGLang binds its own decode kernel, so the MTP-off patch's target is not here: it says so.
VERIFY_PROFILE ?= qwen3.6-35b-a3b-w8a8
verify-patches: patches-pth ## qwen-npu patches verify --strict against the pinned SGLang in .venv (the chart's default mode)
	@args="$$($(BIN)/python -m tools.chart engine-args --profile $(VERIFY_PROFILE))" && \
	echo "PYTHONPATH=tests/stubs qwen-npu patches verify --strict --engine-args <$(VERIFY_PROFILE), as the chart renders it>" && \
	eval "PYTHONPATH=tests/stubs PYTHONWARNINGS=ignore $(BIN)/qwen-npu patches verify --strict --engine-args $$args"

check-wheel-pth: $(STAMP) ## build the wheel, install it in a throwaway venv, check the .pth hook loads
	@rm -rf $(WHEEL_DIR) && mkdir -p $(WHEEL_DIR)
	$(PIP) wheel -q --no-deps -w $(WHEEL_DIR) . $(QUIET_PIP)
	@unzip -l $(WHEEL_DIR)/qwen_npu-*.whl | grep -q ' qwen_npu_patches.pth$$' \
		|| { echo "check-wheel-pth: qwen_npu_patches.pth is not at the wheel's root"; exit 1; }
	$(PYTHON) -m venv $(WHEEL_DIR)/venv
	$(WHEEL_DIR)/venv/bin/python -m pip install -q --disable-pip-version-check --no-deps \
		$(WHEEL_DIR)/qwen_npu-*.whl $(QUIET_PIP)
	cd /tmp && $(CURDIR)/$(WHEEL_DIR)/venv/bin/python -c "import sys; \
		from qwen_npu.patches import hook; \
		assert hook.installed(), 'hook not installed'; \
		assert 'site-packages' in hook.__file__, hook.__file__; \
		print('check-wheel-pth: hook installed at start-up from', hook.__file__)"
	cd /tmp && $(CURDIR)/$(WHEEL_DIR)/venv/bin/qwen-npu ub-plan --value-head-dim 128 \
		--key-head-dim 128 --dtype float32 --json

perf-patches: patches-pth ## the .pth hook's start-up cost, the 397B decision time, GDN decode traffic per route (out/perf/patches.md)
	@mkdir -p $(OUT)/perf
	PERF_RUNS=$(or $(PERF_RUNS),200) $(BIN)/python -m tools.perf.patches --out $(OUT)/perf/patches.md

TEST_DEPS += patches-pth verify-patches
PERF_TARGETS += perf-patches

# A new SGLang release: `make sglang-candidate CANDIDATE=<x>` (or WHEEL=<path>) installs it in a venv
# of its own beside the pinned CPU torch and reports, per patch and per GDN contract link, what it
# changes against the pinned release (docs/patches.md "When SGLang releases"); REPIN=1 then writes
# the new pins and moves SGLANG_VERSION, only when the report is green (never in CI). The venv is
# kept between runs (only SGLang is reinstalled); the report lands in out/sglang-candidate/<x>/.
CANDIDATE_VENV := .venv-candidate
# CANDIDATE, not VERSION: release.mk's VERSION is the chart's version (two things, two names).
CANDIDATE ?=

.PHONY: sglang-candidate sglang-snapshot

sglang-candidate: $(STAMP) ## what SGLang CANDIDATE=<x> (or WHEEL=<path>) changes, per patch; REPIN=1 moves the pins
	@test -n "$(CANDIDATE)$(WHEEL)" || { echo "make sglang-candidate: pass CANDIDATE=<x> (e.g. 0.5.24) or WHEEL=<path to a wheel>$(if $(filter command line,$(origin VERSION)),; VERSION is release's chart version)"; exit 2; }
	$(BIN)/python -m tools.candidate candidate \
		$(if $(WHEEL),--wheel $(WHEEL),--version $(CANDIDATE)) \
		--venv $(CANDIDATE_VENV) --python $(PYTHON) $(if $(filter 1,$(REPIN)),--repin)

sglang-snapshot: $(STAMP) ## write the pinned SGLang's sources, the base of sglang-candidate's diffs
	$(BIN)/python -m tools.candidate snapshot
