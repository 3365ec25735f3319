"""Alerts on the runtime patches, the GDN state contract and the mamba scatter's UB plan, as the
sidecar reports them from the patches' state file.

``disabled`` and ``upstream-fixed`` are deliberate or harmless states and never page; ``drifted``
and ``target-missing`` mean the engine runs without a fix it needs (unless the engine's mode does
not use the patch: ``qwen_npu_patch_used_by_mode`` 0, docs/patches.md "Strictness by mode"), and
``unknown`` (no state file) is only a problem once the engine is ready (the patches write the file
while it starts). A GDN contract link that ``fail``s means a writer and a reader of the SSM state
disagree on its dtype or layout: garbled output, with nothing crashing; ``unknown`` (a link the
engine could not read) is in the evidence and on the dashboard, it does not page.
"""

from __future__ import annotations

from qwen_npu.observability.rules import Alert, AlertGroup

PATCH_NOT_APPLIED = Alert(
    name="QwenNpuPatchNotApplied",
    severity="warning",
    for_="5m",
    summary="A runtime patch is not applied although the engine needs it.",
    description=(
        "Patch {{ $labels.patch }} is {{ $labels.state }} on {{ $labels.instance }}"
        " (pod {{ $labels.pod }}): the engine runs without that fix."
    ),
    expr=(
        '((qwen_npu_patch_state{state=~"drifted|target-missing"} == 1)'
        ' or ((qwen_npu_patch_state{state="unknown"} == 1)'
        " and ignoring (patch, state) (qwen_npu_engine_ready == 1)))"
        # A patch the engine's mode does not use (MTP on and the decode-layout patch, a bf16
        # state and the UB plan patch): a warning at start-up and a runbook line, no alert.
        " unless ignoring (state) (qwen_npu_patch_used_by_mode == 0)"
    ),
)

GDN_CONTRACT_FAILED = Alert(
    name="QwenNpuGdnContractFailed",
    severity="critical",
    for_="1m",
    summary="A link of the GDN state contract fails: the output is or will be garbled.",
    description=(
        "GDN contract link {{ $labels.link }} fails on {{ $labels.instance }}"
        " (pod {{ $labels.pod }}): a writer and a reader of the SSM state disagree on its dtype or"
        " layout; the evidence is in the sidecar's /status (patches.gdn_contract)."
    ),
    expr='qwen_npu_gdn_contract{verdict="fail"} == 1',
)

UB_PLAN_OVERFLOW = Alert(
    name="QwenNpuUbPlanOverflow",
    severity="critical",
    for_="1m",
    summary="The mamba scatter's tile does not fit in the NPU's unified buffer.",
    description=(
        "The {{ $labels.source }} UB plan on {{ $labels.instance }} (pod {{ $labels.pod }})"
        " overflows the unified buffer: the first request or graph capture will die with"
        " 'ub overflow'."
    ),
    expr="(qwen_npu_ub_plane_overflow == 1) or (qwen_npu_ub_headroom_bytes < 0)",
)

UB_PLAN_MISMATCH = Alert(
    name="QwenNpuUbPlanMismatch",
    severity="warning",
    for_="5m",
    summary="The engine's UB plan differs from the one predicted from config.json.",
    description=(
        "The h_block_size the engine computed on {{ $labels.instance }} (pod {{ $labels.pod }})"
        " differs from the prediction: the checkpoint, the mamba state dtype or the TP size is"
        " not what the chart assumes."
    ),
    expr="qwen_npu_ub_plan_mismatch == 1",
)

GROUP = AlertGroup(
    "qwen-npu.patches",
    (PATCH_NOT_APPLIED, GDN_CONTRACT_FAILED, UB_PLAN_OVERFLOW, UB_PLAN_MISMATCH),
)
