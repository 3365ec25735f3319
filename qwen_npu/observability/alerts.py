"""Every alert and recording rule, one section per rule group (``GROUPS``), and their YAML.

``expr`` and ``description`` are ``%(name)s`` templates over the config's helpers and the
threshold keys an alert declares in ``needs`` (anything else is an error at generation time). A
``Recording`` defines a quantity once, so a panel and the alert that watches it cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from qwen_npu.observability.config import Config, threshold_placeholder


class AlertDefinitionError(ValueError):
    """An alert uses or needs something the config does not provide."""


@dataclass(frozen=True)
class Alert:
    name: str  # CamelCase, prefixed QwenNpu; its lowercase form is the runbook anchor
    severity: Literal["warning", "critical"]
    for_: str  # Prometheus duration
    summary: str  # static one-liner
    description: str  # templated with $labels / $value, and %(threshold)s
    expr: str
    needs: tuple[str, ...] = ()  # threshold keys used by expr/description


@dataclass(frozen=True)
class Recording:
    record: str  # level:metric:operations, e.g. qwen_npu:spec_accept_length:rate10m
    expr: str  # no thresholds: a recorded series is a fact, not a verdict
    help: str
    unit: str = "short"  # Grafana unit id of the quantity

    def series_names(self) -> tuple[str, ...]:
        return (self.record,)


@dataclass(frozen=True)
class AlertGroup:
    name: str
    alerts: tuple[Alert, ...] = ()
    recordings: tuple[Recording, ...] = ()


# --- engine ---------------------------------------------------------------------------------------
# The sidecar's view of the engine; the startup gauge freezes at the first ready, so "it stopped
# changing" tells a finished startup from one in progress: a loading engine pages as StartupSlow.

_STARTED = "changes(qwen_npu_engine_startup_elapsed_seconds[5m]) == 0"

ENGINE = AlertGroup(
    "qwen-npu.engine",
    (
        Alert(
            "QwenNpuEngineDown",
            "critical",
            "2m",
            "The SGLang engine does not answer its health endpoint.",
            "The sidecar at {{ $labels.instance }} (pod {{ $labels.pod }}) has not reached the"
            " engine for 2 minutes after it had finished starting. Check the engine container's"
            " logs and restarts.",
            f"(qwen_npu_engine_up == 0) and ({_STARTED})",
        ),
        Alert(
            "QwenNpuEngineNotReady",
            "warning",
            "5m",
            "The engine answers but is not ready to serve (and is not draining).",
            "The engine behind {{ $labels.instance }} (pod {{ $labels.pod }}) has been up but not"
            " ready for 5 minutes after its startup finished; its health generation fails or"
            " hangs.",
            "(qwen_npu_engine_ready == 0) and (qwen_npu_engine_up == 1)"
            f" and (qwen_npu_engine_draining == 0) and ({_STARTED})",
        ),
        Alert(
            "QwenNpuStartupSlow",
            "warning",
            "1m",
            "The engine is taking longer than its startup budget to become ready.",
            "The engine behind {{ $labels.instance }} (pod {{ $labels.pod }}) has been starting"
            " for {{ $value | humanizeDuration }}, over the budget of %(startupBudgetSeconds)s s,"
            " and is still not ready.",
            "(qwen_npu_engine_startup_elapsed_seconds > %(startupBudgetSeconds)s)"
            " and on (instance, job) (qwen_npu_engine_ready == 0)",
            needs=("startupBudgetSeconds",),
        ),
    ),
)


# --- slo ------------------------------------------------------------------------------------------
# p99 against the chart's threshold, only while traffic flows (a quantile of nothing is NaN).


def _p99_slo_burn(name: str, what: str, histogram: str, threshold: str) -> Alert:
    return Alert(
        name,
        "warning",
        "10m",
        f"{what.capitalize()} is over its SLO.",
        f"p99 {what} of {{{{ $labels.model_name }}}} on {{{{ $labels.instance }}}} is"
        f" {{{{ $value | humanizeDuration }}}}, over the SLO of %({threshold})s s,"
        " for 10 minutes.",
        "histogram_quantile(0.99, sum %(without_ranks)s"
        f" (rate({histogram}_bucket[%(window)s]))) > %({threshold})s",
        needs=(threshold,),
    )


SLO = AlertGroup(
    "qwen-npu.slo",
    (
        _p99_slo_burn(
            "QwenNpuTTFTSLOBurn", "time to first token", "sglang:time_to_first_token_seconds",
            "ttftP99Seconds",
        ),
        _p99_slo_burn(
            "QwenNpuTPOTSLOBurn", "time per output token",
            "sglang:request_time_per_output_token_seconds", "tpotP99Seconds",
        ),
        Alert(
            "QwenNpuQueueGrowing",
            "warning",
            "10m",
            "Requests are piling up in the engine's waiting queue.",
            "{{ $value }} requests wait in the queue of {{ $labels.model_name }} on"
            " {{ $labels.instance }} (more than %(queueDepth)s, and still growing over 10"
            " minutes).",
            "(max %(without_ranks)s (sglang:num_queue_reqs) > %(queueDepth)s)"
            " and (max %(without_ranks)s (deriv(sglang:num_queue_reqs[10m])) > 0)",
            needs=("queueDepth",),
        ),
    ),
)  # fmt: skip


# --- output ---------------------------------------------------------------------------------------
# Acceptance is recorded once, for the dashboards and the alert. A collapse means a wrong draft
# module (a quantized MTP head, a corrupted mamba state), which the canary sees in the output.

SPEC_ACCEPT_LENGTH = Recording(
    "qwen_npu:spec_accept_length:rate10m",
    "sum %(without_ranks)s (rate(sglang:generation_tokens_total[10m]))"
    " / (sum %(without_ranks)s (rate(sglang:spec_verify_calls_total[10m])) > 0)",
    "Tokens per verify step over 10 minutes, per engine and model: generated tokens over "
    "verify calls (accepted drafts + the bonus token). Absent without verify calls in the window "
    "(MTP off, no traffic).",
)
SPEC_ACCEPT_RATE = Recording(
    "qwen_npu:spec_accept_rate:rate10m",
    "clamp((qwen_npu:spec_accept_length:rate10m - 1)"
    " / ((max %(without_ranks)s (sglang:spec_num_draft_tokens) > 1) - 1), 0, 1)",
    "Accepted share of the proposed drafts over 10 minutes, per engine and model: (tokens "
    "per verify step - 1) / (draft tokens per verify - 1).",
    "percentunit",
)

OUTPUT = AlertGroup(
    "qwen-npu.output",
    (
        Alert(
            "QwenNpuSpecAcceptanceCollapse",
            "warning",
            "15m",
            "Speculative decoding accepts almost no draft tokens.",
            "{{ $labels.model_name }} on {{ $labels.instance }} accepts"
            ' {{ $value | printf "%%.2f" }} tokens per verify step (minimum'
            " %(specAcceptLengthMin)s) for 15 minutes: MTP costs more than it gives.",
            f"{SPEC_ACCEPT_LENGTH.record} < %(specAcceptLengthMin)s",
            needs=("specAcceptLengthMin",),
        ),
        Alert(
            "QwenNpuCanaryDegenerated",
            "critical",
            "2m",
            "The canary generation came back garbled.",
            "The canary on {{ $labels.instance }} (pod {{ $labels.pod }}) scores"
            ' {{ $value | printf "%%.2f" }} for degeneration (maximum %(canaryDegenerationMax)s):'
            " repeated or garbled output.",
            "qwen_npu_canary_degeneration_score > %(canaryDegenerationMax)s",
            needs=("canaryDegenerationMax",),
        ),
    ),
    recordings=(SPEC_ACCEPT_LENGTH, SPEC_ACCEPT_RATE),
)


# --- patches --------------------------------------------------------------------------------------
# disabled and upstream-fixed never page; drifted and target-missing do unless the engine's mode
# does not use the patch (docs/patches.md "Strictness by mode"); unknown (no state file) only once
# the engine is ready. A failing GDN contract link means garbled output with nothing crashing.

PATCHES = AlertGroup(
    "qwen-npu.patches",
    (
        Alert(
            "QwenNpuPatchNotApplied",
            "warning",
            "5m",
            "A runtime patch is not applied although the engine needs it.",
            "Patch {{ $labels.patch }} is {{ $labels.state }} on {{ $labels.instance }}"
            " (pod {{ $labels.pod }}): the engine runs without that fix.",
            '((qwen_npu_patch_state{state=~"drifted|target-missing"} == 1)'
            ' or ((qwen_npu_patch_state{state="unknown"} == 1)'
            " and ignoring (patch, state) (qwen_npu_engine_ready == 1)))"
            " unless ignoring (state) (qwen_npu_patch_used_by_mode == 0)",
        ),
        Alert(
            "QwenNpuGdnContractFailed",
            "critical",
            "1m",
            "A link of the GDN state contract fails: the output is or will be garbled.",
            "GDN contract link {{ $labels.link }} fails on {{ $labels.instance }}"
            " (pod {{ $labels.pod }}): a writer and a reader of the SSM state disagree on its dtype"
            " or layout; the evidence is in the sidecar's /status (patches.gdn_contract).",
            'qwen_npu_gdn_contract{verdict="fail"} == 1',
        ),
        Alert(
            "QwenNpuUbPlanOverflow",
            "critical",
            "1m",
            "The mamba scatter's tile does not fit in the NPU's unified buffer.",
            "The {{ $labels.source }} UB plan on {{ $labels.instance }} (pod {{ $labels.pod }})"
            " overflows the unified buffer: the first request or graph capture will die with"
            " 'ub overflow'.",
            "(qwen_npu_ub_plane_overflow == 1) or (qwen_npu_ub_headroom_bytes < 0)",
        ),
        Alert(
            "QwenNpuUbPlanMismatch",
            "warning",
            "5m",
            "The engine's UB plan differs from the one predicted from config.json.",
            "The h_block_size the engine computed on {{ $labels.instance }} (pod {{ $labels.pod }})"
            " differs from the prediction: the checkpoint, the mamba state dtype or the TP size is"
            " not what the chart assumes.",
            "qwen_npu_ub_plan_mismatch == 1",
        ),
    ),
)


# --- npu ------------------------------------------------------------------------------------------
# The NPU exporter's chips of the release's pods (config ``npu_selector``: the exporter's
# ``namespace`` label survives the scrape only with ``honor_labels: true``).

NPU = AlertGroup(
    "qwen-npu.npu",
    (
        Alert(
            "QwenNpuChipUnhealthy",
            "critical",
            "2m",
            "An NPU chip serving the engine reports unhealthy.",
            "NPU chip {{ $labels.id }} ({{ $labels.model_name }}) of pod {{ $labels.pod_name }}"
            " reports health status {{ $value }} (1 = healthy) for 2 minutes.",
            "npu_chip_info_health_status{%(npu)s} != 1",
        ),
        Alert(
            "QwenNpuHbmNearFull",
            "warning",
            "10m",
            "An NPU chip's HBM is nearly full.",
            "NPU chip {{ $labels.id }} of pod {{ $labels.pod_name }} uses"
            " {{ $value | humanizePercentage }} of its HBM (maximum %(hbmUsedRatioMax)s).",
            "npu_chip_info_hbm_used_memory{%(npu)s} / npu_chip_info_hbm_total_memory{%(npu)s}"
            " > %(hbmUsedRatioMax)s",
            needs=("hbmUsedRatioMax",),
        ),
    ),
)


# --- router ---------------------------------------------------------------------------------------
# A replica draining for 15 minutes holds a rollout; an ejected worker serves nobody.

ROUTER = AlertGroup(
    "qwen-npu.router",
    (
        Alert(
            "QwenNpuReplicaStuckDraining",
            "warning",
            "15m",
            "A replica has been draining for 15 minutes and has not exited.",
            "The engine behind {{ $labels.instance }} (pod {{ $labels.pod }}) got SIGTERM and has"
            " answered 503 while finishing in-flight requests for over 15 minutes; a request that"
            " never finishes keeps it (and the rollout) waiting until the grace period kills it.",
            "qwen_npu_engine_draining == 1",
        ),
        Alert(
            "QwenNpuRouterWorkerEjected",
            "warning",
            "2m",
            "The router has stopped sending to a worker that failed its health checks.",
            "The router {{ $labels.pod }} has considered worker {{ $labels.worker }} unhealthy for"
            " 2 minutes: it sends it nothing, so the remaining replicas carry its share.",
            "smg_worker_health == 0",
        ),
    ),
)


GROUPS: tuple[AlertGroup, ...] = (ENGINE, SLO, OUTPUT, PATCHES, NPU, ROUTER)


def all_alerts() -> tuple[Alert, ...]:
    return tuple(a for g in GROUPS for a in g.alerts)


def all_recordings() -> tuple[Recording, ...]:
    return tuple(r for g in GROUPS for r in g.recordings)


def _fill(template: str, cfg: Config, needs: tuple[str, ...], what: str) -> str:
    """``template`` with the helpers and the declared thresholds' placeholders, on one line."""
    fields = {"window": cfg.rate_window, "without_ranks": cfg.without_ranks()}
    fields |= {"npu": cfg.npu_selector} | {key: threshold_placeholder(key) for key in needs}
    try:
        text = template % fields
    except KeyError as exc:
        raise AlertDefinitionError(
            f"{what} uses %({exc.args[0]})s but does not declare it in needs="
        ) from None
    except (ValueError, TypeError) as exc:
        raise AlertDefinitionError(f"{what}: bad template ({exc})") from exc
    return " ".join(text.split())


def render_alert(alert: Alert, cfg: Config) -> dict[str, object]:
    missing = [key for key in alert.needs if key not in cfg.thresholds]
    if missing:
        raise AlertDefinitionError(
            f"alert {alert.name} needs threshold(s) {', '.join(missing)} that the config does "
            "not define; add them to qwen_npu/observability/config.py"
        )
    what = f"alert {alert.name}"
    return {
        "alert": alert.name,
        "expr": _fill(alert.expr, cfg, alert.needs, what),
        "for": alert.for_,
        "labels": {"severity": alert.severity},
        "annotations": {
            "summary": alert.summary,
            "description": _fill(alert.description, cfg, alert.needs, what),
            "runbook_url": cfg.runbook_url(alert.name),
        },
    }


def render_groups(groups: tuple[AlertGroup, ...], cfg: Config) -> dict[str, object]:
    """The ``groups:`` document (a Prometheus rule file, and a PrometheusRule's spec)."""
    names = [a.name for g in groups for a in g.alerts] + [
        r.record for g in groups for r in g.recordings
    ]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise AlertDefinitionError(f"duplicate rule names: {', '.join(dupes)}")
    return {
        "groups": [
            {
                "name": g.name,
                # Recordings first: an alert of the group reads the value recorded in the same
                # evaluation.
                "rules": [
                    {"record": r.record, "expr": _fill(r.expr, cfg, (), f"recording {r.record}")}
                    for r in g.recordings
                ]
                + [render_alert(a, cfg) for a in g.alerts],
            }
            for g in groups
        ]
    }
