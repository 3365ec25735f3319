"""THE catalogue of the sidecar's ``qwen_npu_*`` metrics, and the collector that exports them.

Why this exists: dashboards, alert rules, docs and tests all read ``CATALOGUE``; the sidecar
registers exactly these metrics and nothing else, so a renamed metric breaks a test, not a
dashboard at 3 a.m. The names are the contract in docs/architecture.md.

The numbers and the exporting are kept apart (STYLE.md rule 9): the sidecar fills a plain
``SidecarStats`` record, and ``SidecarMetricsCollector.log_stats`` copies it into prometheus_client
objects on a private registry. ``CATALOGUE`` itself needs only the standard library, so the
dashboard generator can import this module without prometheus_client installed. Patch names and
states are not declared here: they come from the patch ledger (``qwen_npu.patches.registry``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qwen_npu.patches import registry
from qwen_npu.serve.metric_spec import MetricSpec

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

PREFIX = "qwen_npu_"

#: Patch names (the ledger's, in its order); every one gets a ``qwen_npu_patch_state`` series.
PATCH_NAMES: tuple[str, ...] = tuple(patch.name for patch in registry.PATCHES)
#: Patch states (the ledger's), plus ``unknown`` when there is no (readable) state file.
PATCH_STATES: tuple[str, ...] = (*registry.STATES, registry.UNKNOWN)
#: Where a UB plan comes from: the state file the engine wrote, or config.json.
UB_SOURCES: tuple[str, ...] = ("engine", "predicted")
#: Kinds of failed exchanges with the engine (``qwen_npu_engine_errors_total{kind}``).
ERROR_KINDS: tuple[str, ...] = ("connect", "timeout", "status", "too_large", "malformed")
#: Outcomes of one canary request (``qwen_npu_canary_runs_total{result}``).
CANARY_RESULTS: tuple[str, ...] = ("ok", "degenerated", "golden_mismatch", "error")

HEALTH_PROBE_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 30,
)  # fmt: skip
CANARY_LATENCY_BUCKETS: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120,
)  # fmt: skip


def _g(name: str, help_: str, unit: str = "short", labels: tuple[str, ...] = ()) -> MetricSpec:
    return MetricSpec(PREFIX + name, "gauge", help_, labels, unit=unit)


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
    MetricSpec(
        PREFIX + "engine_health_probe_seconds",
        "histogram",
        "Latency of the sidecar's /health_generate probes (failures too, up to the timeout).",
        buckets=HEALTH_PROBE_BUCKETS,
        unit="s",
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
    MetricSpec(
        PREFIX + "engine_restarts_total",
        "counter",
        "Engine restarts seen: the engine port refused connections after it had been ready.",
        unit="short",
    ),
    MetricSpec(
        PREFIX + "engine_errors_total",
        "counter",
        "Failed exchanges with the engine by kind (connect, timeout, status, too_large, "
        "malformed); expected failures while the engine is still starting are not counted.",
        ("kind",),
        unit="short",
    ),
    # Build and patches.
    MetricSpec(
        PREFIX + "build_info",
        "info",
        "Always 1; labels carry the qwen-npu and SGLang versions (unknown when not reported).",
        ("qwen_npu_version", "sglang_version"),
        unit="short",
    ),
    _g(
        "patch_state",
        "1 for each patch's current state, 0 for its other states; state unknown when the state "
        "file is missing or corrupt.",
        labels=("patch", "state"),
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
    MetricSpec(
        PREFIX + "spec_info",
        "info",
        "Always 1; the speculative algorithm (none when off, unknown before /server_info answers).",
        ("algorithm",),
        unit="short",
    ),
    _g("spec_num_steps", "speculative_num_steps from /server_info."),
    _g(
        "spec_num_draft_tokens",
        "speculative_num_draft_tokens (draft tokens per verify) from /server_info.",
    ),
    _g(
        "spec_accept_length",
        "Tokens per verify over the window: delta generation_tokens / delta spec_verify_calls "
        "(NaN when no verify in the window).",
    ),
    _g(
        "spec_accept_rate",
        "Accepted share of drafts over the window: (accept_length - 1) / (draft tokens - 1).",
        "percentunit",
    ),
    _g("spec_window_seconds", "Length of the sliding window of the spec acceptance metrics.", "s"),
    # Output-quality canary.
    MetricSpec(
        PREFIX + "canary_runs_total",
        "counter",
        "Canary requests by result (ok, degenerated, golden_mismatch, error).",
        ("result",),
        unit="short",
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
    MetricSpec(
        PREFIX + "canary_latency_seconds",
        "histogram",
        "Latency of canary requests.",
        buckets=CANARY_LATENCY_BUCKETS,
        unit="s",
    ),
)

BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in CATALOGUE}

NAN = math.nan


@dataclass
class UbStats:
    """One UB plan as exported (``None`` fields mean unknown)."""

    known: bool = False
    ub_bytes: float = NAN
    h_block_size: float = NAN
    tile_bytes: float = NAN
    buffered_bytes: float = NAN
    headroom_bytes: float = NAN
    plane_overflow: float = NAN


@dataclass
class SidecarStats:
    """Everything the collector exports, as plain numbers (filled by the sidecar's poller).

    Counters are cumulative totals; the collector adds the difference since the last call.
    """

    engine_up: bool = False
    engine_ready: bool = False
    engine_draining: bool = False
    consecutive_failures: int = 0
    startup_elapsed_s: float = 0.0
    startup_budget_s: float = 0.0
    uptime_s: float = 0.0
    restarts: int = 0
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_KINDS, 0))
    qwen_npu_version: str = "unknown"
    sglang_version: str = "unknown"
    patch_states: dict[str, str] = field(
        default_factory=lambda: dict.fromkeys(PATCH_NAMES, "unknown")
    )
    ub: dict[str, UbStats] = field(default_factory=lambda: {s: UbStats() for s in UB_SOURCES})
    ub_mismatch: bool = False
    spec_enabled: bool = False
    spec_algorithm: str = "unknown"
    spec_num_steps: float = NAN
    spec_num_draft_tokens: float = NAN
    spec_accept_length: float = NAN
    spec_accept_rate: float = NAN
    spec_window_s: float = 0.0
    canary_runs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CANARY_RESULTS, 0))
    canary_degeneration_score: float = NAN
    canary_longest_repeat_tokens: float = NAN
    canary_golden_prefix_ratio: float = NAN
    canary_last_success_ts: float = NAN


class SidecarMetricsCollector:
    """Declares every ``CATALOGUE`` metric on one registry and copies ``SidecarStats`` into them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge, Histogram, Info

        self.registry = registry
        self._metrics: dict[str, Any] = {}
        for spec in CATALOGUE:
            short = spec.name
            if spec.kind == "gauge":
                metric: Any = Gauge(short, spec.help, spec.labels, registry=registry)
            elif spec.kind == "counter":
                metric = Counter(
                    short.removesuffix("_total"), spec.help, spec.labels, registry=registry
                )
            elif spec.kind == "histogram":
                metric = Histogram(
                    short, spec.help, spec.labels, buckets=spec.buckets, registry=registry
                )
            else:
                metric = Info(short.removesuffix("_info"), spec.help, registry=registry)
            self._metrics[spec.name] = metric
        self._counted: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        # Series that exist from the first scrape (0), so rate() and absent() work at once.
        for kind in ERROR_KINDS:
            self._metrics[PREFIX + "engine_errors_total"].labels(kind=kind)
        for result in CANARY_RESULTS:
            self._metrics[PREFIX + "canary_runs_total"].labels(result=result)
        self.log_stats(SidecarStats())

    # The helpers every value goes through (one place for labels and NaN handling).
    def _log_gauge(self, name: str, value: float, **labels: str) -> None:
        metric = self._metrics[PREFIX + name]
        (metric.labels(**labels) if labels else metric).set(float(value))

    def _log_counter(self, name: str, total: float, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        delta = total - self._counted.get(key, 0.0)
        if delta > 0:
            metric = self._metrics[PREFIX + name]
            (metric.labels(**labels) if labels else metric).inc(delta)
            self._counted[key] = total

    def _log_info(self, name: str, values: Mapping[str, str]) -> None:
        self._metrics[PREFIX + name].info(dict(values))

    def observe(self, name: str, seconds: float) -> None:
        """One observation of a histogram (the health probe or canary latency)."""
        self._metrics[PREFIX + name].observe(seconds)

    def log_time(self, stats: SidecarStats) -> None:
        """The gauges that move with the clock (refreshed on every scrape)."""
        self._log_gauge("engine_startup_elapsed_seconds", stats.startup_elapsed_s)
        self._log_gauge("engine_uptime_seconds", stats.uptime_s)

    def log_stats(self, stats: SidecarStats) -> None:
        self._log_gauge("engine_up", stats.engine_up)
        self._log_gauge("engine_ready", stats.engine_ready)
        self._log_gauge("engine_draining", stats.engine_draining)
        self._log_gauge("engine_consecutive_failures", stats.consecutive_failures)
        self._log_gauge("startup_budget_seconds", stats.startup_budget_s)
        self.log_time(stats)
        self._log_counter("engine_restarts_total", stats.restarts)
        for kind, total in stats.errors.items():
            self._log_counter("engine_errors_total", total, kind=kind)

        self._log_info(
            "build_info",
            {"qwen_npu_version": stats.qwen_npu_version, "sglang_version": stats.sglang_version},
        )
        for patch, current in stats.patch_states.items():
            for state in PATCH_STATES:
                self._log_gauge("patch_state", state == current, patch=patch, state=state)

        for source in UB_SOURCES:
            ub = stats.ub.get(source, UbStats())
            self._log_gauge("ub_plan_known", ub.known, source=source)
            self._log_gauge("ub_budget_bytes", ub.ub_bytes, source=source)
            self._log_gauge("ub_head_block_size", ub.h_block_size, source=source)
            self._log_gauge("ub_tile_bytes", ub.tile_bytes, source=source)
            self._log_gauge("ub_buffered_bytes", ub.buffered_bytes, source=source)
            self._log_gauge("ub_headroom_bytes", ub.headroom_bytes, source=source)
            self._log_gauge("ub_plane_overflow", ub.plane_overflow, source=source)
        self._log_gauge("ub_plan_mismatch", stats.ub_mismatch)

        self._log_gauge("spec_enabled", stats.spec_enabled)
        self._log_info("spec_info", {"algorithm": stats.spec_algorithm})
        self._log_gauge("spec_num_steps", stats.spec_num_steps)
        self._log_gauge("spec_num_draft_tokens", stats.spec_num_draft_tokens)
        self._log_gauge("spec_accept_length", stats.spec_accept_length)
        self._log_gauge("spec_accept_rate", stats.spec_accept_rate)
        self._log_gauge("spec_window_seconds", stats.spec_window_s)

        for result, total in stats.canary_runs.items():
            self._log_counter("canary_runs_total", total, result=result)
        self._log_gauge("canary_degeneration_score", stats.canary_degeneration_score)
        self._log_gauge("canary_longest_repeat_tokens", stats.canary_longest_repeat_tokens)
        self._log_gauge("canary_golden_prefix_ratio", stats.canary_golden_prefix_ratio)
        self._log_gauge("canary_last_success_timestamp_seconds", stats.canary_last_success_ts)
