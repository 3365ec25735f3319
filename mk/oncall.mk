# On-call kill switches over helm (docs/runbook.md). Each target prints every command it runs
# ("+ helm ...", "+ kubectl ..."), then waits for the engine rollout, the pods' readiness and the
# sidecar's /readyz, and fails (non-zero) with the next step when one of them does not come.
#
#   make mtp-off | mtp-on                    speculative decoding (MTP/NEXTN) off / on
#   make patch-off PATCH=<name> | patch-on   one runtime patch off / on (QWEN_NPU_DISABLE_PATCHES)
#   make rollback [REVISION=n]               helm rollback (default: the previous revision), then the same checks
#   make status                              release history, user values, pods, the sidecar's /status,
#                                            the router's view of its workers (when router.enabled)
# Variables: RELEASE (qwen-npu), NAMESPACE (default), CHART (helm/qwen-npu), ROLLOUT_TIMEOUT (35m:
# a Recreate rollout reloads the model, up to the chart's startup budget of 30 min),
# ENGINE_KIND (deployment; leaderworkerset for multi-node engines), HELM, KUBECTL, ONCALL_PYTHON.
#
# Why `helm upgrade --reuse-values --set ...`: the release keeps every value it was installed with
# (the checkpoint profile, images, thresholds) and only the switch changes, as one new helm
# revision that `make rollback` can undo. Run it with the chart of the deployed revision (the same
# checkout); with a newer chart use VALUES_MODE=--reset-then-reuse-values (Helm >= 3.14: the new
# chart's defaults, then the release's values). The alternative, `kubectl set env` on the
# Deployment, is faster to type but invisible to helm: the next upgrade silently reverts it.

RELEASE ?= qwen-npu
NAMESPACE ?= default
CHART ?= helm/qwen-npu
HELM ?= helm
KUBECTL ?= kubectl
ONCALL_PYTHON ?= python3
ROLLOUT_TIMEOUT ?= 35m
ENGINE_KIND ?= deployment
VALUES_MODE ?= --reuse-values
SIDECAR_PORT ?= 9400
REVISION ?=
PATCH ?=

# The chart's fullname rule: the release name when it contains the chart name, else <release>-qwen-npu.
ONCALL_FULLNAME := $(if $(findstring qwen-npu,$(RELEASE)),$(RELEASE),$(RELEASE)-qwen-npu)
ENGINE_WORKLOAD := $(ONCALL_FULLNAME)-engine
ENGINE_SELECTOR := app.kubernetes.io/instance=$(RELEASE),app.kubernetes.io/component=engine
SERVING_SELECTOR := $(ENGINE_SELECTOR),qwen-npu.io/role=leader
PATCH_NAMES = $(shell $(ONCALL_PYTHON) -c "import sys; sys.path.insert(0, '.'); from qwen_npu.patches.registry import PATCHES; print(' '.join(p.name for p in PATCHES))" 2>/dev/null)

# A bash prelude: `run` prints a command (arguments with spaces or quotes in single quotes, ready
# to paste) and runs it.
ONCALL_SH = set -euo pipefail; run() { local a q out="+"; for a in "$$@"; do \
	if [[ "$$a" =~ ^[A-Za-z0-9_./:=,@%+-]+$$ ]]; then out+=" $$a"; \
	else q="$${a//\'/\'\\\'\'}"; out+=" '$$q'"; fi; done; echo "$$out"; "$$@"; };
# Both tools first, so a machine without them gets one line, not "command not found" mid-switch.
ONCALL_SH += need() { command -v "$$1" >/dev/null 2>&1 || { echo "make $@: $$2=$$1 is not found \
	or not executable; install $$3 or set $$2=/path/to/$$3 (docs/runbook.md)"; exit 127; }; }; \
	need $(firstword $(HELM)) HELM helm; need $(firstword $(KUBECTL)) KUBECTL kubectl;
KNS = $(KUBECTL) --namespace $(NAMESPACE)
# Runs in the sidecar container (its image has Python, no curl): GET one sidecar path, print the
# status code and body, exit non-zero unless 200. One line, no traceback.
sidecar_get = import sys, urllib.request as u, urllib.error as e; U = 'http://127.0.0.1:$(SIDECAR_PORT)$(1)'; exec('try: r = u.urlopen(U, timeout=10); c, b = r.status, r.read()\nexcept e.HTTPError as x: c, b = x.code, x.read()\nexcept OSError as x: c, b = 0, str(x).encode()'); print('$(1)', c, b.decode()); sys.exit(c != 200)
READYZ_PY = $(call sidecar_get,/readyz)
STATUS_PY = $(call sidecar_get,/status)
# Runs in the router container (the engine image: Python, no curl): the router's view of its
# workers from GET /workers, one line per worker (url, healthy, load), then the totals.
ROUTER_PORT ?= 30000
ROUTER_SELECTOR := app.kubernetes.io/instance=$(RELEASE),app.kubernetes.io/component=router
ROUTER_WORKERS_PY = import json, sys, urllib.request as u; U = 'http://127.0.0.1:$(ROUTER_PORT)/workers'; exec('try: w = json.load(u.urlopen(U, timeout=10)).get(\"workers\", [])\nexcept Exception as x: print(U, x); sys.exit(1)'); [print('router worker', x.get('url'), 'healthy=' + str(x.get('is_healthy')).lower(), 'load=' + str(x.get('load'))) for x in w]; bad = [x for x in w if not x.get('is_healthy')]; print('router workers:', len(w), 'healthy:', len(w) - len(bad)); sys.exit(1 if bad or not w else 0)

# Rollout, pod readiness, the sidecar's /readyz; the next step when one fails. `kubectl rollout
# status` knows Deployments only: a LeaderWorkerSet engine waits on its pods.
ifeq ($(ENGINE_KIND),deployment)
ONCALL_ROLLOUT = run $(KNS) rollout status deployment/$(ENGINE_WORKLOAD) --timeout=$(ROLLOUT_TIMEOUT) \
	|| { echo "$@: the rollout did not finish; next: make status, then $(KNS) describe pod --selector $(ENGINE_SELECTOR)"; exit 1; };
else
ONCALL_ROLLOUT =
endif
ONCALL_WAIT = $(ONCALL_ROLLOUT) \
	run $(KNS) wait --for=condition=Ready pod --selector $(SERVING_SELECTOR) --timeout=$(ROLLOUT_TIMEOUT) \
	|| { echo "$@: engine pods not Ready; next: make status, then $(KNS) logs --selector $(ENGINE_SELECTOR) -c engine --tail 100"; exit 1; }; \
	pod=$$($(KNS) get pod --selector $(SERVING_SELECTOR) -o jsonpath='{.items[0].metadata.name}'); \
	run $(KNS) exec "$$pod" -c sidecar -- python3 -c "$(READYZ_PY)" \
	|| { echo "$@: the sidecar's /readyz says not ready; next: make status (its /status says why)"; exit 1; }; \
	echo "$@: done, release $(RELEASE) in $(NAMESPACE) is ready (make status for details)"

define check_patch
@if [ -z "$(PATCH_NAMES)" ]; then echo "make $@: cannot read the patch list (qwen_npu/patches/registry.py) with $(ONCALL_PYTHON); run from the repository root"; exit 2; fi
@if [ -z "$(PATCH)" ]; then echo "make $@: set PATCH=<name>, one of: $(PATCH_NAMES)"; exit 2; fi
@case " $(PATCH_NAMES) " in *" $(PATCH) "*) ;; *) echo "make $@: unknown patch '$(PATCH)'; PATCH must be one of: $(PATCH_NAMES) (qwen_npu/patches/registry.py)"; exit 2;; esac
endef

# The release's patches.disabled list with PATCH added (add) or removed (remove), as JSON.
DISABLED_PY = import json, sys; sys.excepthook = lambda t, e, b: print("helm get values did not print JSON:", e, file=sys.stderr); v = json.load(sys.stdin) or {}; cur = list((v.get("patches") or {}).get("disabled") or []); op, p = sys.argv[1:3]; new = (cur + [p] if p not in cur else cur) if op == "add" else [x for x in cur if x != p]; print(json.dumps(new, separators=(",", ":")))
disabled_list = $$($(HELM) get values $(RELEASE) --namespace $(NAMESPACE) --output json | $(ONCALL_PYTHON) -c '$(DISABLED_PY)' $(1) $(PATCH))

.PHONY: mtp-off mtp-on patch-off patch-on rollback status

mtp-off: ## on-call: turn MTP speculative decoding off (first lever for garbled output)
	@$(ONCALL_SH) \
	run $(HELM) upgrade $(RELEASE) $(CHART) --namespace $(NAMESPACE) $(VALUES_MODE) --set mtp.enabled=false \
	|| { echo "$@: helm upgrade failed (its error is above); next: make status"; exit 1; }; \
	$(ONCALL_WAIT)

mtp-on: ## on-call: turn MTP speculative decoding back on
	@$(ONCALL_SH) \
	run $(HELM) upgrade $(RELEASE) $(CHART) --namespace $(NAMESPACE) $(VALUES_MODE) --set mtp.enabled=true \
	|| { echo "$@: helm upgrade failed (its error is above); next: make status"; exit 1; }; \
	$(ONCALL_WAIT)

patch-off: ## on-call: switch one runtime patch off (PATCH=<name>)
	$(check_patch)
	@$(ONCALL_SH) \
	disabled=$(call disabled_list,add) \
	|| { echo "$@: cannot read the release's values (helm get values $(RELEASE) --namespace $(NAMESPACE)); next: make status"; exit 1; }; \
	run $(HELM) upgrade $(RELEASE) $(CHART) --namespace $(NAMESPACE) $(VALUES_MODE) --set-json "patches.disabled=$$disabled" \
	|| { echo "$@: helm upgrade failed (its error is above); next: make status"; exit 1; }; \
	$(ONCALL_WAIT)

patch-on: ## on-call: switch a runtime patch back on (PATCH=<name>)
	$(check_patch)
	@$(ONCALL_SH) \
	disabled=$(call disabled_list,remove) \
	|| { echo "$@: cannot read the release's values (helm get values $(RELEASE) --namespace $(NAMESPACE)); next: make status"; exit 1; }; \
	run $(HELM) upgrade $(RELEASE) $(CHART) --namespace $(NAMESPACE) $(VALUES_MODE) --set-json "patches.disabled=$$disabled" \
	|| { echo "$@: helm upgrade failed (its error is above); next: make status"; exit 1; }; \
	$(ONCALL_WAIT)

rollback: ## on-call: helm rollback [REVISION=n] (default: previous), then wait until healthy
	@case "$(REVISION)" in ""|*[!0-9]*) [ -z "$(REVISION)" ] || { echo "make $@: REVISION=$(REVISION) is not a revision number; see the REVISION column of: make status"; exit 2; };; esac
	@$(ONCALL_SH) \
	run $(HELM) history $(RELEASE) --namespace $(NAMESPACE) --max 10 \
	|| { echo "$@: helm cannot read release $(RELEASE) in $(NAMESPACE) (its error is above); next: check RELEASE=, NAMESPACE= and kubectl config current-context"; exit 1; }; \
	run $(HELM) rollback $(RELEASE) $(REVISION) --namespace $(NAMESPACE) \
	|| { echo "$@: helm rollback failed (its error is above); next: make status"; exit 1; }; \
	$(ONCALL_WAIT)

status: ## on-call: release history, values, pods and the sidecar's /status
	@$(ONCALL_SH) \
	run $(HELM) history $(RELEASE) --namespace $(NAMESPACE) --max 10 \
	|| { echo "$@: helm cannot read release $(RELEASE) in $(NAMESPACE) (its error is above); next: check RELEASE=, NAMESPACE= and kubectl config current-context"; exit 1; }; \
	run $(HELM) get values $(RELEASE) --namespace $(NAMESPACE) \
	|| { echo "$@: helm get values failed (its error is above); next: helm get values $(RELEASE) --namespace $(NAMESPACE) --all"; exit 1; }; \
	run $(KNS) get pods --selector app.kubernetes.io/instance=$(RELEASE) --output wide \
	|| { echo "$@: kubectl cannot list pods in $(NAMESPACE) (its error is above); next: kubectl auth can-i list pods --namespace $(NAMESPACE)"; exit 1; }; \
	pod=$$($(KNS) get pod --selector $(SERVING_SELECTOR) -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true); \
	if [ -z "$$pod" ]; then echo "$@: no serving engine pod of release $(RELEASE) in $(NAMESPACE); next: kubectl --namespace $(NAMESPACE) get events --sort-by=.lastTimestamp"; exit 1; fi; \
	run $(KNS) exec "$$pod" -c sidecar -- python3 -c "$(STATUS_PY)" \
	|| { echo "$@: the sidecar of $$pod did not answer /status (its error is above); next: kubectl --namespace $(NAMESPACE) logs $$pod -c sidecar --tail=50"; exit 1; }; \
	router=$$($(KNS) get pod --selector $(ROUTER_SELECTOR) -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true); \
	if [ -z "$$router" ]; then echo "$@: no router pod in release $(RELEASE) (router.enabled=false): clients reach the engine Service directly"; exit 0; fi; \
	run $(KNS) exec "$$router" -c router -- python3 -c "$(ROUTER_WORKERS_PY)" \
	|| { echo "$@: the router $$router lists no worker or an unhealthy one (above); next: docs/runbook.md#qwennpurouterworkerejected"; exit 1; }
