# The router in front of simulator replicas (issue 15): install the pinned router, prove failover.
#
#   make router-venv        the pinned router (sglang-router==SGLANG_ROUTER_VERSION) in .venv-router
#   make failover           rolling replacement, SIGKILL, a hung replica, a loading replica, each under
#                           the CONC 10 load test -> out/perf/failover.md and out/perf/failover.jsonl
#
# The router lives in its own venv: its pins (fastapi, uvicorn, ...) must not move .venv's. The
# harness finds it through QWEN_NPU_ROUTER_BIN (the tests too). FAILOVER_ARGS passes harness flags
# (make failover FAILOVER_ARGS="--scenario kill --scenario hang").

ROUTER_VENV := .venv-router
ROUTER_BIN := $(ROUTER_VENV)/bin/smg
ROUTER_STAMP := $(ROUTER_VENV)/.installed-$(SGLANG_ROUTER_VERSION)
FAILOVER_ARGS ?=

.PHONY: router-venv failover

router-venv: $(ROUTER_STAMP) ## install the pinned router (sglang-router, `smg launch`) in .venv-router

# fastapi, uvicorn and requests at the pins of pyproject.toml's extras (their one home).
ROUTER_SHARED_PINS = $(shell $(PYTHON) -c "import re, tomllib; x = tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']; p = {re.split('[=<>~!\\[ ]', s)[0]: s for v in x.values() for s in v}; print(' '.join(p[n] for n in ('fastapi', 'uvicorn', 'requests')))")

$(ROUTER_STAMP): docker/versions.env requirements/router.txt pyproject.toml
	@echo ">> creating $(ROUTER_VENV) with sglang-router==$(SGLANG_ROUTER_VERSION)"
	@test -x $(ROUTER_VENV)/bin/python || $(PYTHON) -m venv $(ROUTER_VENV)
	@$(ROUTER_VENV)/bin/python -m pip --disable-pip-version-check install -q --progress-bar off \
		sglang-router==$(SGLANG_ROUTER_VERSION) -r requirements/router.txt $(ROUTER_SHARED_PINS) > $(ROUTER_VENV)/pip.log 2>&1 \
		|| { echo "router-venv: sglang-router==$(SGLANG_ROUTER_VERSION) (SGLANG_ROUTER_VERSION in docker/versions.env) does not install (pip's log: $(ROUTER_VENV)/pip.log); pick a version PyPI has: pip index versions sglang-router"; exit 1; }
	@$(ROUTER_BIN) launch --help >/dev/null 2>&1 || { echo "router-venv: $(ROUTER_BIN) launch --help fails; sglang-router==$(SGLANG_ROUTER_VERSION) has no 'smg launch' command (check SGLANG_ROUTER_VERSION in docker/versions.env)"; exit 1; }
	@touch $@

failover: $(STAMP) $(ROUTER_STAMP) ## the router in front of simulator replicas under load: drain, kill, hang, loading (out/perf/failover.md)
	@mkdir -p $(OUT)/perf
	QWEN_NPU_ROUTER_BIN=$(ROUTER_BIN) $(BIN)/python -m tools.proofs.failover --out $(OUT)/perf/failover.md $(FAILOVER_ARGS)

PERF_TARGETS += failover
TEST_DEPS += $(ROUTER_STAMP)
