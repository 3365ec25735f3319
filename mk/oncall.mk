# On-call kill switches over helm (docs/runbook.md): each target runs `qwen-npu oncall <switch>`
# (qwen_npu/oncall/), which prints every command it runs ("+ helm ...", "+ kubectl ..."), then
# waits for the engine rollout, the pods' readiness and the sidecar's /readyz, and fails (non-zero)
# with the next step when one of them does not come.
#
#   make mtp-off | mtp-on                    speculative decoding (MTP/NEXTN) off / on
#   make patch-off PATCH=<name> | patch-on   one runtime patch off / on (QWEN_NPU_DISABLE_PATCHES)
#   make rollback [REVISION=n]               helm rollback (default: the previous revision), then the same checks
#   make status                              release history, user values, pods, the sidecar's /status,
#                                            the router's view of its workers (when router.enabled)
#   make -s engine-ref                       the engine's workload as kubectl names it (deployment/<name>)
# Variables: RELEASE (qwen-npu), NAMESPACE (default), CHART (this checkout's helm/qwen-npu, by
# absolute path), ROLLOUT_TIMEOUT (35m: a Recreate rollout reloads the model, up to the chart's
# startup budget of 30 min), HELM, KUBECTL, ONCALL_PYTHON (python3: the switches need the standard
# library only), SIDECAR_PORT, ROUTER_PORT, VALUES_MODE. Except CHART, their defaults are
# `qwen-npu oncall`'s own (qwen_npu/oncall/cli.py): a variable left unset passes no flag. The engine's names (nameOverride/fullnameOverride included) and its kind
# (Deployment or, multi-node, LeaderWorkerSet) are read from the release's manifest.
#
# Why `helm upgrade --reuse-values --set ...`: the release keeps every value it was installed with
# (the checkpoint profile, images, thresholds) and only the switch changes, as one new helm
# revision that `make rollback` can undo. Run it with the chart of the deployed revision (the same
# checkout); with a newer chart use VALUES_MODE=--reset-then-reuse-values (Helm >= 3.14: the new
# chart's defaults, then the release's values). The alternative, `kubectl set env` on the
# Deployment, is faster to type but invisible to helm: the next upgrade silently reverts it.

ONCALL_PYTHON ?= python3
# The chart to upgrade with: this checkout's, by absolute path (`qwen-npu oncall` requires --chart:
# a relative default would be read from whatever folder the command runs in).
CHART ?= $(CURDIR)/helm/qwen-npu

# make's variable -> the flag it sets (only when the variable is set)
ONCALL_FLAGS = $(foreach pair,RELEASE:release NAMESPACE:namespace CHART:chart HELM:helm \
	KUBECTL:kubectl ROLLOUT_TIMEOUT:timeout VALUES_MODE:values-mode SIDECAR_PORT:sidecar-port \
	ROUTER_PORT:router-port,$(call oncall_flag,$(word 1,$(subst :, ,$(pair))),$(word 2,$(subst :, ,$(pair)))))
oncall_flag = $(if $($(1)),--$(2)='$($(1))')
ONCALL = PYTHONPATH=$(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH)) $(ONCALL_PYTHON) -m qwen_npu oncall \
	--via make $(ONCALL_FLAGS)

.PHONY: mtp-off mtp-on patch-off patch-on rollback status engine-ref

mtp-off: ## on-call: turn MTP speculative decoding off (first lever for garbled output)
	@$(ONCALL) mtp-off

mtp-on: ## on-call: turn MTP speculative decoding back on
	@$(ONCALL) mtp-on

patch-off: ## on-call: switch one runtime patch off (PATCH=<name>)
	@$(ONCALL) patch-off $(if $(PATCH),--patch '$(PATCH)')

patch-on: ## on-call: switch a runtime patch back on (PATCH=<name>)
	@$(ONCALL) patch-on $(if $(PATCH),--patch '$(PATCH)')

rollback: ## on-call: helm rollback [REVISION=n] (default: previous), then wait until healthy
	@$(ONCALL) rollback $(if $(REVISION),--revision '$(REVISION)')

status: ## on-call: release history, values, pods and the sidecar's /status
	@$(ONCALL) status

engine-ref: ## on-call: the engine's workload (deployment/<name> or leaderworkerset/<name>), read from the release
	@$(ONCALL) engine
