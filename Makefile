# qwen-npu: the verbs. `make help` lists them.
#
# One virtual environment, .venv/, holds everything the tests and tools need (the CPU torch wheel,
# SGLang's real modules, the project with all extras, the linters). `make setup` builds it once and
# again only when a pin changes; every target below depends on it, so any target works on a fresh
# clone. Parts add their own targets in mk/<part>.mk and register them in TEST_DEPS / PERF_TARGETS.

SHELL := /bin/bash
.DEFAULT_GOAL := help

include docker/versions.env

PYTHON ?= $(shell command -v python$(TEST_PYTHON_VERSION) 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip --disable-pip-version-check
# Downloads into wheelhouses need only a pip, not .venv: the base Python's, so they run beside
# `make setup` in make test's parallel set-up.
DOWNLOAD_PIP := $(PYTHON) -m pip --disable-pip-version-check
# pip's local mirrors on some machines print one warning per package: keep the log readable.
# sglang is installed with --no-deps on purpose, so pip's resolver lists what sglang "requires" (its
# GPU stack, torch==2.14.1): expected, filtered out here; see requirements/sglang-cpu.txt.
QUIET_PIP := 2>&1 | { grep -v -e "is ignored: it is neither a file nor a directory" -e "^$$" \
	-e "^sglang .* requires " -e "dependency resolver does not currently" || true; }; exit $${PIPESTATUS[0]}
OUT := out

TEST_DEPS :=
PERF_TARGETS :=

.PHONY: help setup test test-fast lint fmt perf clean

# The parts' targets (they add to TEST_DEPS and PERF_TARGETS, so this comes before the rules that read them).
include $(sort $(wildcard mk/*.mk))

help: ## list the verbs
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | \
		awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}' | sort -u

setup: $(STAMP) ## build .venv (CPU torch, the pinned SGLang modules, qwen-npu with all extras)

$(STAMP): pyproject.toml requirements/sglang-cpu.txt docker/versions.env
	@echo ">> creating $(VENV) with $(PYTHON) ($$($(PYTHON) --version))"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo ">> torch==$(TEST_TORCH_VERSION) (the CPU wheel; pip, not uv), what SGLang's modules import on CPU, qwen-npu (editable) with every extra"
	@$(PIP) install -q --progress-bar off torch==$(TEST_TORCH_VERSION) -r requirements/sglang-cpu.txt \
		-e '.[sidecar,sim,bench,observability,fetch,dev]' $(QUIET_PIP)
	@echo ">> sglang==$(SGLANG_VERSION) without its GPU dependencies"
	@$(PIP) install -q --progress-bar off --no-deps sglang==$(SGLANG_VERSION) $(QUIET_PIP)
	@$(BIN)/python -c "import torch, sglang, qwen_npu; assert torch.__version__.startswith('$(TEST_TORCH_VERSION)'), torch.__version__" \
		|| { echo "setup: the environment does not import; see the pip output above"; exit 1; }
	@touch $@
	@echo ">> $(VENV) ready"

# make test's set-up runs in two phases: the Debian tools in one apt-get (`make tools`: dpkg takes
# one lock), then the environments, wheelhouses, images and the linters in parallel (SETUP_JOBS:
# pip and podman wait on the network and the disk as much as on the CPU; each line of their output
# is printed whole, and each names its step). ruff and mypy run there as `make lint`, not inside
# pytest, so test-fast stays quick.
SETUP_JOBS ?= 4
# pytest's worker processes (pytest-xdist): three on two cores, because many tests spend their
# time waiting on servers and child processes (test-fast 93 s with 2, 83-91 s with 3). Whole files
# go to one worker (--dist loadfile), so a module's expensive fixture (SGLang's MTP model build,
# a simulator) runs once, not once per worker: pytest 7 min 38 s against 8 min 15 s work-stealing.
# 0 runs the tests in make's own pytest process.
TEST_WORKERS ?= 3
XDIST = -n $(TEST_WORKERS) $(if $(filter 0,$(TEST_WORKERS)),,--dist loadfile)

.PHONY: test-setup
test-setup: $(STAMP) $(TEST_DEPS) ## install everything make test needs (venvs, tools, images), nothing run

# Each set-up phase's wall time is printed when it ends (">> phase ..."), so a CI log says where
# the minutes went; pytest's own summary line (the log's last) gives its time.
PHASE = start=$$(date +%s); $(1); rc=$$?; echo ">> phase $(2): $$(( $$(date +%s) - start )) s"; exit $$rc

test: ## run every test and the linters (what CI runs)
	@$(call PHASE,$(MAKE) --no-print-directory tools,Debian tools)
	@$(call PHASE,$(MAKE) --no-print-directory -j$(SETUP_JOBS) --output-sync=line test-setup lint,set-up and lint)
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

# The edit-test loop: no slow test, none that needs SGLang's wheel or a system tool. `make test`
# (what CI runs) stays the one that counts.
FAST_MARKERS := not slow and not sglang and not system
test-fast: $(STAMP) ## the quick subset for the edit-test loop (no slow, SGLang or system-tool tests)
	$(BIN)/python -m pytest -m "$(FAST_MARKERS)" -q $(XDIST) $(PYTEST_ARGS)

lint: $(STAMP) ## ruff, mypy and the house's import contracts (import-linter, pyproject.toml)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: $(STAMP) ## format the code with ruff
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

perf: $(STAMP) $(PERF_TARGETS) ## run the benchmarks; figures land in out/perf/ and docs/perf.md
	@echo ">> perf figures:"; ls -1 $(OUT)/perf 2>/dev/null | sed 's/^/   out\/perf\//'
	$(BIN)/python -m tools.perf.assemble $(OUT)/perf --page docs/perf.md

clean: ## remove generated output (keeps .venv)
	rm -rf $(OUT) .pytest_cache .mypy_cache .ruff_cache

