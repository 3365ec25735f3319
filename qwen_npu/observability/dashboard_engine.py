"""The "Qwen NPU / Engine internals" dashboard: why an engine is (not) healthy: its health
history, the patches' states, the scatter's UB plan, and the NPU chips of the release's pods (the
``pod`` variable lists the pods with a sidecar; the NPU exporter calls the same pod ``pod_name``).
"""

from __future__ import annotations

from qwen_npu.observability.config import DEFAULT, Config
from qwen_npu.observability.panels import Board, Query, query_variable

FILENAME = "qwen-npu-engine-internals.json"
TITLE = "Qwen NPU / Engine internals"

SIDECAR = 'namespace=~"$namespace", pod=~"$pod"'
CHIP = 'namespace=~"$namespace", pod_name=~"$pod"'
LEGEND = "{{pod}} {{instance}}"
CHIP_LEGEND = "{{pod_name}} chip {{id}}"


def _q(metric: str, legend: str) -> Query:
    """``metric`` of the selected sidecars, legend ``legend`` and the pod's."""
    return Query(f"{metric}{{{SIDECAR}}}", f"{legend} {LEGEND}")


def _chip(expr: str) -> list[Query]:
    """``expr`` with every ``{}`` the selected pods' chips."""
    return [Query(expr.replace("{}", f"{{{CHIP}}}"), CHIP_LEGEND)]


def build(cfg: Config = DEFAULT) -> Board:
    b = Board(
        TITLE,
        "Engine health history, runtime patch states, the mamba scatter's UB plan and the "
        "NPU chips of the release's pods.",
        cfg,
        query_variable("namespace", "Namespace", "label_values(qwen_npu_engine_up, namespace)"),
        query_variable(
            "pod",
            "Engine pod",
            'label_values(qwen_npu_engine_up{namespace=~"$namespace"}, pod)',
            all_value=None,  # 'All' = the pods with a sidecar, so chips of other pods stay out
        ),
    )

    b.row("Engine health")
    b.timeseries(
        "Engine up, ready, draining",
        "1/0 history of the sidecar's probes: up (answers /health), ready (a health generation "
        "succeeds), draining (shutting down on purpose). Down after startup pages as "
        "QwenNpuEngineDown; up but not ready as QwenNpuEngineNotReady; draining for 15 minutes "
        "as QwenNpuReplicaStuckDraining.",
        "short",
        [
            _q("qwen_npu_engine_up", "up"),
            _q("qwen_npu_engine_ready", "ready"),
            _q("qwen_npu_engine_draining", "draining"),
        ],
        alert=("QwenNpuEngineDown", "QwenNpuEngineNotReady", "QwenNpuReplicaStuckDraining"),
        min_val=0,
        max_val=1,
    )
    b.timeseries(
        "Startup elapsed",
        "Seconds from engine start to first ready (frozen once ready), against the budget. "
        "QwenNpuStartupSlow fires above the red line "
        "(engine.startupBudgetSeconds, the one startup budget) while still not ready.",
        "s",
        [
            _q("qwen_npu_engine_startup_elapsed_seconds", "elapsed"),
            _q("qwen_npu_startup_budget_seconds", "sidecar budget"),
        ],
        threshold="startupBudgetSeconds",
        alert="QwenNpuStartupSlow",
    )
    b.timeseries(
        "Health probe latency",
        "p50/p99 of the sidecar's health probes (qwen_npu_engine_health_probe_seconds); a "
        "growing p99 precedes a wedged engine.",
        "s",
        [
            Query(
                f"histogram_quantile({q}, sum by (le, namespace, pod, instance) "
                f"(rate(qwen_npu_engine_health_probe_seconds_bucket{{{SIDECAR}}}"
                "[$__rate_interval])))",
                f"p{round(q * 100)} {LEGEND}",
            )
            for q in (0.5, 0.99)
        ],
        width=8,
    )
    b.timeseries(
        "Engine errors by kind",
        "Failed exchanges with the engine per second (qwen_npu_engine_errors_total): connect, "
        "timeout, status, too_large, malformed; and consecutive failed probes.",
        "short",
        [
            Query(
                "sum by (namespace, pod, instance, kind) "
                f"(rate(qwen_npu_engine_errors_total{{{SIDECAR}}}[$__rate_interval]))",
                "{{kind}} " + LEGEND,
            ),
            _q("qwen_npu_engine_consecutive_failures", "consecutive failures"),
        ],
        width=8,
    )
    b.timeseries(
        "Uptime and restarts",
        "Engine uptime as the sidecar measures it and the restarts it counted "
        "(qwen_npu_engine_restarts_total).",
        "s",
        [
            _q("qwen_npu_engine_uptime_seconds", "uptime"),
            _q("qwen_npu_engine_restarts_total", "restarts"),
        ],
        width=8,
    )

    b.row("Patches and build")
    b.table(
        "Patch states",
        "Current state of each runtime patch (qwen_npu_patch_state == 1): applied, disabled "
        "(QWEN_NPU_DISABLE_PATCHES), upstream-fixed, drifted, target-missing, unknown (no state "
        "file). drifted/target-missing page as QwenNpuPatchNotApplied, unless the engine's mode "
        "does not run the patch (qwen_npu_patch_used_by_mode 0: MTP on or off, the state dtype; "
        "then it warns at start and must be fixed before switching mode).",
        [
            Query(f"qwen_npu_patch_state{{{SIDECAR}}} == 1", instant=True),
            Query(f"qwen_npu_patch_used_by_mode{{{SIDECAR}}}", instant=True),
        ],
        alert="QwenNpuPatchNotApplied",
    )
    b.table(
        "GDN state contract",
        "Each link's current verdict (qwen_npu_gdn_contract == 1), from the state file the "
        "engine's processes write: pool_layout, prefill_op, verify_op, mover, decode_kernel, "
        "ssm_dtype. pass; fail (a writer and a reader of the SSM state disagree: garbled "
        "output); unknown (not checked or not readable here). The evidence is in the sidecar's "
        "/status. A fail pages as QwenNpuGdnContractFailed.",
        [Query(f"qwen_npu_gdn_contract{{{SIDECAR}}} == 1", instant=True)],
        alert="QwenNpuGdnContractFailed",
    )
    b.table(
        "Build and speculative decoding",
        "Versions the sidecar reads (qwen_npu_build_info) and the speculative algorithm "
        "(qwen_npu_spec_info).",
        [
            Query(f"qwen_npu_build_info{{{SIDECAR}}}", instant=True),
            Query(f"qwen_npu_spec_info{{{SIDECAR}}}", instant=True),
        ],
    )

    b.row("UB plan (mamba scatter)")
    b.timeseries(
        "h_block_size: engine vs predicted",
        "The h_block_size the engine's scatter patch computed (source=engine, from the state "
        "file) and the one predicted from config.json (source=predicted). They must agree; "
        "otherwise QwenNpuUbPlanMismatch fires.",
        "short",
        [
            _q("qwen_npu_ub_head_block_size", "{{source}}"),
            _q("qwen_npu_ub_plan_mismatch", "mismatch"),
        ],
        alert="QwenNpuUbPlanMismatch",
        width=8,
    )
    b.timeseries(
        "UB use vs budget",
        "Buffered tile bytes (tile x multi-buffer) against the unified-buffer budget, per source.",
        "bytes",
        [
            _q("qwen_npu_ub_buffered_bytes", "buffered {{source}}"),
            _q("qwen_npu_ub_tile_bytes", "tile {{source}}"),
            _q("qwen_npu_ub_budget_bytes", "budget {{source}}"),
        ],
        width=8,
    )
    b.timeseries(
        "UB headroom",
        "Budget minus buffered tile bytes. Below zero (red) the scatter dies with 'ub "
        "overflow'; QwenNpuUbPlanOverflow fires.",
        "bytes",
        [
            _q("qwen_npu_ub_headroom_bytes", "{{source}}"),
            _q("qwen_npu_ub_plane_overflow", "plane overflow {{source}}"),
        ],
        threshold=0.0,
        direction="below",
        alert="QwenNpuUbPlanOverflow",
        width=8,
    )

    b.row("NPU chips (NPU exporter)")
    b.timeseries(
        "NPU utilization",
        "AI core utilization per chip (npu_chip_info_utilization, percent).",
        "percent",
        _chip("npu_chip_info_utilization{}"),
        width=8,
        min_val=0,
        max_val=100,
    )
    b.timeseries(
        "HBM used ratio",
        "Used over total HBM per chip. QwenNpuHbmNearFull fires above the red line "
        "(monitoring.prometheusRule.thresholds.hbmUsedRatioMax) for 10 minutes; SGLang's "
        "--mem-fraction-static reserves most of it on purpose.",
        "percentunit",
        _chip("npu_chip_info_hbm_used_memory{} / npu_chip_info_hbm_total_memory{}"),
        threshold="hbmUsedRatioMax",
        alert="QwenNpuHbmNearFull",
        width=8,
        min_val=0,
        max_val=1,
    )
    for title, description, unit, series in (
        ("HBM used", "HBM in use per chip (npu_chip_info_hbm_used_memory, MB as the exporter "
         "reports it).", "mbytes", "npu_chip_info_hbm_used_memory"),
        ("Chip temperature", "Chip temperature (npu_chip_info_temperature).", "celsius",
         "npu_chip_info_temperature"),
        ("Chip power", "Chip power draw (npu_chip_info_power).", "watt", "npu_chip_info_power"),
    ):  # fmt: skip
        b.timeseries(title, description, unit, _chip(series + "{}"), width=8)
    b.timeseries(
        "Chip health",
        "npu_chip_info_health_status: 1 = healthy. Anything else for 2 minutes pages as "
        "QwenNpuChipUnhealthy.",
        "short",
        _chip("npu_chip_info_health_status{}"),
        threshold=1.0,
        direction="below",
        alert="QwenNpuChipUnhealthy",
        width=8,
    )
    return b
