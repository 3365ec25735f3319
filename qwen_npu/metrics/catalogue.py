"""THE catalogue of the sidecar's ``qwen_npu_*`` metrics: names, kinds, help, labels, buckets.

The collector builds exactly these families at scrape time, and the dashboards, alerts, docs and
tests read them, so a renamed metric breaks a test, not a dashboard. Patch names and states and
the GDN contract's links and verdicts come from the patch ledger. Standard library only.
"""

from __future__ import annotations

from qwen_npu.constants import UNKNOWN
from qwen_npu.metrics.spec import MetricSpec
from qwen_npu.patches import registry

PREFIX = "qwen_npu_"

#: Patch names (the ledger's, in its order); every one gets a ``qwen_npu_patch_state`` series.
PATCH_NAMES: tuple[str, ...] = tuple(patch.name for patch in registry.PATCHES)
#: Patch states (the ledger's), plus ``unknown`` when there is no (readable) state file.
PATCH_STATES: tuple[str, ...] = (*registry.STATES, UNKNOWN)
#: Where a UB plan comes from: the state file the engine wrote, or config.json.
UB_SOURCES: tuple[str, ...] = ("engine", "predicted")
#: Kinds of failed exchanges with the engine (``qwen_npu_engine_errors_total{kind}``).
ERROR_KINDS: tuple[str, ...] = ("connect", "timeout", "status", "too_large", "malformed")
#: Outcomes of one canary request (``qwen_npu_canary_runs_total{result}``).
CANARY_RESULTS: tuple[str, ...] = ("ok", "degenerated", "golden_mismatch", "error")
#: The GDN state contract's links (the ledger's, in its order) and their verdicts.
GDN_LINKS: tuple[str, ...] = tuple(link.name for link in registry.GDN_CONTRACT)
GDN_VERDICTS: tuple[str, ...] = registry.CONTRACT_VERDICTS

HEALTH_PROBE_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 30,
)  # fmt: skip
CANARY_LATENCY_BUCKETS: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120,
)  # fmt: skip


def _g(name: str, help_: str, unit: str = "short", labels: tuple[str, ...] = ()) -> MetricSpec:
    return MetricSpec(PREFIX + name, "gauge", help_, labels, unit=unit)


def _c(name: str, help_: str, labels: tuple[str, ...] = ()) -> MetricSpec:
    return MetricSpec(PREFIX + name, "counter", help_, labels, unit="short")


def _h(name: str, help_: str, buckets: tuple[float, ...]) -> MetricSpec:
    return MetricSpec(PREFIX + name, "histogram", help_, buckets=buckets, unit="s")


def _i(name: str, help_: str, labels: tuple[str, ...]) -> MetricSpec:
    return MetricSpec(PREFIX + name, "info", help_, labels, unit="short")


CATALOGUE: tuple[MetricSpec, ...] = (
    # Engine health, as the sidecar's background probe sees it.
    _g("engine_up", "1 when the engine's HTTP server answers at all (any status), else 0."),
    _g(
        "engine_ready",
        "1 when the last /health_generate answered 200 and the engine is not draining.",
    ),
    _g(
        "engine_draining",
        "1 when the engine answers 503 after having been ready (SGLang shutting down).",
    ),
    _h(
        "engine_health_probe_seconds",
        "Latency of the sidecar's /health_generate probes (failures too, up to the timeout).",
        HEALTH_PROBE_BUCKETS,
    ),
    _g(
        "engine_consecutive_failures",
        "Consecutive /health_generate probes that did not answer 200 (any reason).",
    ),
    _g(
        "engine_startup_elapsed_seconds",
        "Seconds since the current engine start began; frozen once it is first ready.",
        "s",
    ),
    _g(
        "startup_budget_seconds",
        "The startup budget the sidecar allows (QWEN_NPU_STARTUP_BUDGET_S).",
        "s",
    ),
    _g(
        "engine_uptime_seconds",
        "Seconds since the current engine start was first ready; 0 before.",
        "s",
    ),
    _c(
        "engine_restarts_total",
        "Engine restarts seen: the engine port refused connections after it had been ready.",
    ),
    _c(
        "engine_errors_total",
        "Failed exchanges with the engine by kind (connect, timeout, status, too_large, "
        "malformed); expected failures while the engine is still starting are not counted.",
        ("kind",),
    ),
    # Build and patches.
    _i(
        "build_info",
        "Always 1; labels carry the qwen-npu and SGLang versions (unknown when not reported).",
        ("qwen_npu_version", "sglang_version"),
    ),
    _g(
        "patch_state",
        "1 for each patch's current state, 0 for its other states; state unknown when the state "
        "file is missing or corrupt.",
        labels=("patch", "state"),
    ),
    _g(
        "patch_used_by_mode",
        "1 when the engine's mode (MTP on/off, SSM state dtype, draft quantization) runs the code "
        "the patch fixes, 0 when it does not (a problem with it then does not fail the start), "
        "NaN when the state file does not say.",
        labels=("patch",),
    ),
    _g(
        "gdn_contract",
        "1 for each GDN state contract link's current verdict (pass, fail, unknown), 0 for the "
        "other two; unknown when the state file does not report the link.",
        labels=("link", "verdict"),
    ),
    # Unified-buffer plan of the mamba scatter: what the engine used and what config.json predicts.
    _g("ub_plan_known", "1 when the plan of this source is known.", labels=("source",)),
    _g("ub_budget_bytes", "UB budget the plan was made for, in bytes.", "bytes", ("source",)),
    _g(
        "ub_head_block_size", "Planned h_block_size of move_intermediate_cache.", labels=("source",)
    ),
    _g("ub_tile_bytes", "Bytes of one [h, V, K] tile.", "bytes", ("source",)),
    _g(
        "ub_buffered_bytes", "Bytes of the tile times the compiler's buffers.", "bytes", ("source",)
    ),
    _g(
        "ub_headroom_bytes",
        "UB budget minus buffered bytes (negative: overflow).",
        "bytes",
        ("source",),
    ),
    _g(
        "ub_plane_overflow",
        "1 when one (V, K) plane alone, buffered, exceeds the UB budget.",
        labels=("source",),
    ),
    _g(
        "ub_plan_mismatch",
        "1 when both plans are known and their h_block_size or tile bytes differ, else 0.",
    ),
    # Speculative decoding.
    _g("spec_enabled", "1 when the engine runs speculative decoding (from /server_info)."),
    _i(
        "spec_info",
        "Always 1; the speculative algorithm (none when off, unknown before /server_info answers).",
        ("algorithm",),
    ),
    _g("spec_num_steps", "speculative_num_steps from /server_info."),
    _g(
        "spec_num_draft_tokens",
        "speculative_num_draft_tokens (draft tokens per verify) from /server_info.",
    ),
    # Output-quality canary.
    _c(
        "canary_runs_total",
        "Canary requests by result (ok, degenerated, golden_mismatch, error).",
        ("result",),
    ),
    _g(
        "canary_degeneration_score",
        "Share of repeated 3-grams in the last canary output (0 clean .. 1 one loop); NaN before.",
        "percentunit",
    ),
    _g(
        "canary_longest_repeat_tokens",
        "Longest stretch of the last canary output that repeats itself.",
    ),
    _g(
        "canary_golden_prefix_ratio",
        "Matching prefix of the last canary output / golden output length (NaN without golden).",
        "percentunit",
    ),
    _g(
        "canary_last_success_timestamp_seconds",
        "Unix time of the last ok canary run.",
        "dateTimeAsIso",
    ),
    _h("canary_latency_seconds", "Latency of canary requests.", CANARY_LATENCY_BUCKETS),
)

BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in CATALOGUE}
