"""Every alert and recording rule, one section per rule group, in the order the rule file lists
them; ``GROUPS`` is that order. Each section says what its alerts watch and why.

Why one module: the groups are declarations of one shape (``rules.Alert``, ``rules.Recording``),
each a few dozen lines; side by side they read as the one list the runbook's sections follow.
"""

from __future__ import annotations

from qwen_npu.observability.rules import Alert, AlertGroup, Recording

# --- engine ---------------------------------------------------------------------------------------
# Engine liveness alerts: down, not ready, and a startup that outlives its budget.
#
# All three read the sidecar's view of the engine (``qwen_npu_engine_*``), which keeps reporting
# while the engine is loading or wedged. ``qwen_npu_engine_startup_elapsed_seconds`` grows until the
# first ready and then freezes, so "it stopped changing" is how the rules tell a finished startup
# from one in progress: a loading engine pages as StartupSlow, never as Down or NotReady.

_STARTED = "changes(qwen_npu_engine_startup_elapsed_seconds[5m]) == 0"

ENGINE_DOWN = Alert(
    name="QwenNpuEngineDown",
    severity="critical",
    for_="2m",
    summary="The SGLang engine does not answer its health endpoint.",
    description=(
        "The sidecar at {{ $labels.instance }} (pod {{ $labels.pod }}) has not reached the engine"
        " for 2 minutes after it had finished starting. Check the engine container's logs and"
        " restarts."
    ),
    expr=f"(qwen_npu_engine_up == 0) and ({_STARTED})",
)

ENGINE_NOT_READY = Alert(
    name="QwenNpuEngineNotReady",
    severity="warning",
    for_="5m",
    summary="The engine answers but is not ready to serve (and is not draining).",
    description=(
        "The engine behind {{ $labels.instance }} (pod {{ $labels.pod }}) has been up but not"
        " ready for 5 minutes after its startup finished; its health generation fails or hangs."
    ),
    expr=(
        "(qwen_npu_engine_ready == 0) and (qwen_npu_engine_up == 1)"
        f" and (qwen_npu_engine_draining == 0) and ({_STARTED})"
    ),
)

STARTUP_SLOW = Alert(
    name="QwenNpuStartupSlow",
    severity="warning",
    for_="1m",
    summary="The engine is taking longer than its startup budget to become ready.",
    description=(
        "The engine behind {{ $labels.instance }} (pod {{ $labels.pod }}) has been starting for"
        " {{ $value | humanizeDuration }}, over the budget of %(startupBudgetSeconds)s s, and is"
        " still not ready."
    ),
    expr=(
        "(qwen_npu_engine_startup_elapsed_seconds > %(startupBudgetSeconds)s)"
        " and on (instance, job) (qwen_npu_engine_ready == 0)"
    ),
    needs=("startupBudgetSeconds",),
)

ENGINE = AlertGroup("qwen-npu.engine", (ENGINE_DOWN, ENGINE_NOT_READY, STARTUP_SLOW))


# --- slo ------------------------------------------------------------------------------------------
# Latency and backlog alerts on SGLang's own histograms and gauges.
#
# The SLO alerts compare the p99 over the config's rate window with the chart's threshold, for ten
# minutes, and only while the engine serves traffic (``histogram_quantile`` of no requests is NaN,
# which never compares true). TP/PP ranks of one engine are folded into one series.


def _p99(histogram: str) -> str:
    return f"histogram_quantile(0.99, sum %(without_ranks)s (rate({histogram}_bucket[%(window)s])))"


def _p99_slo_burn(name: str, what: str, histogram: str, threshold: str) -> Alert:
    """An SLO burn alert: the p99 of ``histogram`` over the ``threshold`` value for 10 minutes."""
    return Alert(
        name=name,
        severity="warning",
        for_="10m",
        summary=f"{what.capitalize()} is over its SLO.",
        description=(
            f"p99 {what} of {{{{ $labels.model_name }}}} on {{{{ $labels.instance }}}} is"
            f" {{{{ $value | humanizeDuration }}}}, over the SLO of %({threshold})s s,"
            " for 10 minutes."
        ),
        expr=_p99(histogram) + f" > %({threshold})s",
        needs=(threshold,),
    )


TTFT_SLO_BURN = _p99_slo_burn(
    "QwenNpuTTFTSLOBurn", "time to first token", "sglang:time_to_first_token_seconds",
    "ttftP99Seconds",
)  # fmt: skip
TPOT_SLO_BURN = _p99_slo_burn(
    "QwenNpuTPOTSLOBurn", "time per output token",
    "sglang:request_time_per_output_token_seconds", "tpotP99Seconds",
)  # fmt: skip

QUEUE_GROWING = Alert(
    name="QwenNpuQueueGrowing",
    severity="warning",
    for_="10m",
    summary="Requests are piling up in the engine's waiting queue.",
    description=(
        "{{ $value }} requests wait in the queue of {{ $labels.model_name }} on"
        " {{ $labels.instance }} (more than %(queueDepth)s, and still growing over 10 minutes)."
    ),
    expr=(
        "(max %(without_ranks)s (sglang:num_queue_reqs) > %(queueDepth)s)"
        " and (max %(without_ranks)s (deriv(sglang:num_queue_reqs[10m])) > 0)"
    ),
    needs=("queueDepth",),
)

SLO = AlertGroup("qwen-npu.slo", (TTFT_SLO_BURN, TPOT_SLO_BURN, QUEUE_GROWING))


# --- output ---------------------------------------------------------------------------------------
# Output quality: speculative acceptance (recorded once) and the alerts on it and the canary.
#
# Acceptance is defined here, once, as recording rules over SGLang's counters (generated tokens per
# verify call over 10 minutes, per engine); the dashboards plot the recorded series and
# QwenNpuSpecAcceptanceCollapse compares it with its threshold, so the panel and the alert cannot
# disagree. It only exists while MTP runs and traffic flows; a collapse means the draft module is
# wrong (e.g. a quantized MTP head or a corrupted mamba state), which is also what the canary
# catches on the output side (the garbled Qwen3.6 NEXTN text of sgl-kernel-npu PR #748).

SPEC_ACCEPT_LENGTH = Recording(
    record="qwen_npu:spec_accept_length:rate10m",
    expr=(
        "sum %(without_ranks)s (rate(sglang:generation_tokens_total[10m]))"
        " / (sum %(without_ranks)s (rate(sglang:spec_verify_calls_total[10m])) > 0)"
    ),
    help="Tokens per verify step over 10 minutes, per engine and model: generated tokens over "
    "verify calls (accepted drafts + the bonus token). Absent without verify calls in the window "
    "(MTP off, no traffic).",
)
SPEC_ACCEPT_RATE = Recording(
    record="qwen_npu:spec_accept_rate:rate10m",
    expr=(
        "clamp((qwen_npu:spec_accept_length:rate10m - 1)"
        " / ((max %(without_ranks)s (sglang:spec_num_draft_tokens) > 1) - 1), 0, 1)"
    ),
    help="Accepted share of the proposed drafts over 10 minutes, per engine and model: (tokens "
    "per verify step - 1) / (draft tokens per verify - 1).",
    unit="percentunit",
)

SPEC_ACCEPTANCE_COLLAPSE = Alert(
    name="QwenNpuSpecAcceptanceCollapse",
    severity="warning",
    for_="15m",
    summary="Speculative decoding accepts almost no draft tokens.",
    description=(
        '{{ $labels.model_name }} on {{ $labels.instance }} accepts {{ $value | printf "%%.2f" }}'
        " tokens per verify step (minimum %(specAcceptLengthMin)s) for 15 minutes: MTP costs more"
        " than it gives."
    ),
    expr=f"{SPEC_ACCEPT_LENGTH.record} < %(specAcceptLengthMin)s",
    needs=("specAcceptLengthMin",),
)

CANARY_DEGENERATED = Alert(
    name="QwenNpuCanaryDegenerated",
    severity="critical",
    for_="2m",
    summary="The canary generation came back garbled.",
    description=(
        "The canary on {{ $labels.instance }} (pod {{ $labels.pod }}) scores"
        ' {{ $value | printf "%%.2f" }} for degeneration (maximum %(canaryDegenerationMax)s):'
        " repeated or garbled output."
    ),
    expr="qwen_npu_canary_degeneration_score > %(canaryDegenerationMax)s",
    needs=("canaryDegenerationMax",),
)

OUTPUT = AlertGroup(
    "qwen-npu.output",
    (SPEC_ACCEPTANCE_COLLAPSE, CANARY_DEGENERATED),
    recordings=(SPEC_ACCEPT_LENGTH, SPEC_ACCEPT_RATE),
)


# --- patches --------------------------------------------------------------------------------------
# Alerts on the runtime patches, the GDN state contract and the mamba scatter's UB plan, as the
# sidecar reports them from the patches' state file.
#
# ``disabled`` and ``upstream-fixed`` are deliberate or harmless states and never page; ``drifted``
# and ``target-missing`` mean the engine runs without a fix it needs (unless the engine's mode does
# not use the patch: ``qwen_npu_patch_used_by_mode`` 0, docs/patches.md "Strictness by mode"), and
# ``unknown`` (no state file) is only a problem once the engine is ready (the patches write the file
# while it starts). A GDN contract link that ``fail``s means a writer and a reader of the SSM state
# disagree on its dtype or layout: garbled output, with nothing crashing; ``unknown`` (a link the
# engine could not read) is in the evidence and on the dashboard, it does not page.

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

PATCHES = AlertGroup(
    "qwen-npu.patches",
    (PATCH_NOT_APPLIED, GDN_CONTRACT_FAILED, UB_PLAN_OVERFLOW, UB_PLAN_MISMATCH),
)


# --- npu ------------------------------------------------------------------------------------------
# Alerts on the NPU exporter's chip metrics, for the chips of the release's pods.
#
# The selector (config ``npu_selector``) keeps the chips allocated to pods in the release's
# namespace; the exporter's own ``namespace`` label survives the scrape only with
# ``honor_labels: true``.

CHIP_UNHEALTHY = Alert(
    name="QwenNpuChipUnhealthy",
    severity="critical",
    for_="2m",
    summary="An NPU chip serving the engine reports unhealthy.",
    description=(
        "NPU chip {{ $labels.id }} ({{ $labels.model_name }}) of pod {{ $labels.pod_name }}"
        " reports health status {{ $value }} (1 = healthy) for 2 minutes."
    ),
    expr="npu_chip_info_health_status{%(npu)s} != 1",
)

HBM_NEAR_FULL = Alert(
    name="QwenNpuHbmNearFull",
    severity="warning",
    for_="10m",
    summary="An NPU chip's HBM is nearly full.",
    description=(
        "NPU chip {{ $labels.id }} of pod {{ $labels.pod_name }} uses"
        " {{ $value | humanizePercentage }} of its HBM (maximum %(hbmUsedRatioMax)s)."
    ),
    expr=(
        "npu_chip_info_hbm_used_memory{%(npu)s} / npu_chip_info_hbm_total_memory{%(npu)s}"
        " > %(hbmUsedRatioMax)s"
    ),
    needs=("hbmUsedRatioMax",),
)

NPU = AlertGroup("qwen-npu.npu", (CHIP_UNHEALTHY, HBM_NEAR_FULL))


# --- router ---------------------------------------------------------------------------------------
# Rollout and failover alerts: a replica stuck draining, a worker the router ejected.
#
# A replica drains on SIGTERM (in-flight requests finish, /health answers 503, the sidecar reports
# ``qwen_npu_engine_draining``); one still draining after 15 minutes holds a rollout and its
# accelerators. The router (``smg_*`` metrics, metrics/external.py) stops sending
# to a worker whose health checks failed; one ejected for 2 minutes serves nobody while still
# counted as a replica. Both link to their docs/runbook.md sections.

REPLICA_STUCK_DRAINING = Alert(
    name="QwenNpuReplicaStuckDraining",
    severity="warning",
    for_="15m",
    summary="A replica has been draining for 15 minutes and has not exited.",
    description=(
        "The engine behind {{ $labels.instance }} (pod {{ $labels.pod }}) got SIGTERM and has"
        " answered 503 while finishing in-flight requests for over 15 minutes; a request that"
        " never finishes keeps it (and the rollout) waiting until the grace period kills it."
    ),
    expr="qwen_npu_engine_draining == 1",
)

ROUTER_WORKER_EJECTED = Alert(
    name="QwenNpuRouterWorkerEjected",
    severity="warning",
    for_="2m",
    summary="The router has stopped sending to a worker that failed its health checks.",
    description=(
        "The router {{ $labels.pod }} has considered worker {{ $labels.worker }} unhealthy for"
        " 2 minutes: it sends it nothing, so the remaining replicas carry its share."
    ),
    expr="smg_worker_health == 0",
)

ROUTER = AlertGroup("qwen-npu.router", (REPLICA_STUCK_DRAINING, ROUTER_WORKER_EJECTED))


GROUPS: tuple[AlertGroup, ...] = (ENGINE, SLO, OUTPUT, PATCHES, NPU, ROUTER)


def all_alerts() -> tuple[Alert, ...]:
    return tuple(a for g in GROUPS for a in g.alerts)


def by_name() -> dict[str, Alert]:
    return {a.name: a for a in all_alerts()}


def all_recordings() -> tuple[Recording, ...]:
    return tuple(r for g in GROUPS for r in g.recordings)
