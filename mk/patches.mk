# qwen-npu runtime patches (qwen_npu/patches, docs/patches.md).
#   make verify-patches   qwen-npu patches verify --strict against .venv's SGLang (part of make test)
#   make patches-pth      make sure .venv's site-packages holds the current qwen_npu_patches.pth
#   make check-wheel-pth  build the wheel, install it --no-deps in a throwaway venv, check the hook
#   make perf-patches     start-up cost of the .pth hook and the decision time -> out/perf/patches.md
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

verify-patches: patches-pth ## qwen-npu patches verify --strict against the pinned SGLang in .venv
	PYTHONPATH=tests/stubs $(BIN)/python -W ignore -m qwen_npu.cli patches verify --strict

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

perf-patches: patches-pth ## the .pth hook's start-up cost and the 397B decision time (out/perf/patches.md)
	@mkdir -p $(OUT)/perf
	$(BIN)/python -m tools.perf.patches --runs $(or $(PERF_RUNS),200) --out $(OUT)/perf/patches.md

TEST_DEPS += patches-pth verify-patches
PERF_TARGETS += perf-patches
