"""Selectors, thresholds and conventions shared by every dashboard and alert.

The thresholds are chart values (``monitoring.prometheusRule.thresholds.<key>``). The generated
files do not hold their numbers: they hold placeholders (``${thresholds.<key>}``) that the chart's
templates replace with the values at render time, so what promtool tests is exactly what the
chart deploys. The defaults below must equal ``helm/qwen-npu/values.yaml`` (a test compares them);
they are what the docs quote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

# Where the chart keeps the values this module mirrors.
THRESHOLDS_VALUES_PATH: Final = "monitoring.prometheusRule.thresholds"
RUNBOOK_VALUES_PATH: Final = "monitoring.runbookBaseUrl"


@dataclass(frozen=True)
class Threshold:
    """One tunable number an alert compares against (and the matching panels draw)."""

    key: str  # camelCase key under monitoring.prometheusRule.thresholds
    default: float
    unit: str  # Grafana unit id of the quantity
    help: str


_THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        "startupBudgetSeconds",
        1800,
        "s",
        "how long the engine may take from start to first ready (model load, graph capture)",
    ),
    Threshold("ttftP99Seconds", 2.0, "s", "time-to-first-token SLO: p99 over 5 minutes"),
    Threshold("tpotP99Seconds", 0.1, "s", "time-per-output-token SLO: p99 over 5 minutes"),
    Threshold("queueDepth", 32, "short", "queued requests per engine that count as a backlog"),
    Threshold(
        "specAcceptLengthMin",
        1.5,
        "short",
        "mean accepted tokens per verify step below which MTP costs more than it gives",
    ),
    Threshold(
        "canaryDegenerationMax",
        0.5,
        "percentunit",
        "canary degeneration score (0..1) above which the output is garbled",
    ),
    Threshold("hbmUsedRatioMax", 0.95, "percentunit", "used/total HBM ratio per chip"),
)

THRESHOLDS: Final = MappingProxyType({t.key: t for t in _THRESHOLDS})


def threshold_placeholder(key: str) -> str:
    """The text the chart replaces with ``monitoring.prometheusRule.thresholds.<key>``."""
    if key not in THRESHOLDS:
        raise KeyError(f"unknown threshold {key!r}; known: {', '.join(THRESHOLDS)}")
    return "${thresholds." + key + "}"


RUNBOOK_BASE_PLACEHOLDER: Final = "${runbookBaseUrl}"
NAMESPACE_PLACEHOLDER: Final = "${release.namespace}"


@dataclass(frozen=True)
class Config:
    """Everything the generators read. One instance, ``DEFAULT``, is what ships."""

    # Grafana unit and window conventions.
    rate_window: str = "5m"  # alert rate() windows
    # Labels that split one engine's sglang:* series (ranks, streaming or not): folded away so
    # that one engine is one series.
    sglang_rank_labels: tuple[str, ...] = (
        "tp_rank",
        "pp_rank",
        "moe_ep_rank",
        "engine_type",
        "is_streaming",
    )
    # Selector for the NPU exporter's series that belong to the release (the exporter puts the
    # pod's namespace in `namespace`; scrape it with honor_labels: true so it is kept).
    npu_selector: str = f'namespace="{NAMESPACE_PLACEHOLDER}"'
    # runbook_url = pattern with {base} and {anchor} (the lowercased alert name).
    runbook_url_pattern: str = "{base}#{anchor}"
    runbook_base: str = RUNBOOK_BASE_PLACEHOLDER
    # Dashboard conventions applied in one pass (dashboard_finish.py).
    dashboard_tags: tuple[str, ...] = ("qwen-npu",)
    dashboard_refresh: str = "30s"
    dashboard_timezone: str = "utc"
    dashboard_time_from: str = "now-3h"
    thresholds: MappingProxyType[str, Threshold] = field(default_factory=lambda: THRESHOLDS)

    def runbook_url(self, alert_name: str) -> str:
        return self.runbook_url_pattern.format(base=self.runbook_base, anchor=alert_name.lower())

    def without_ranks(self) -> str:
        """``without (...)`` clause that folds an engine's TP/PP ranks into one series."""
        return "without (" + ", ".join(self.sglang_rank_labels) + ")"


DEFAULT: Final = Config()
