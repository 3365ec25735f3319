"""Selectors, thresholds and conventions shared by every dashboard and alert.

The thresholds are chart values (``monitoring.prometheusRule.thresholds.<key>``). The generated
files do not hold their numbers: they hold placeholders (``${thresholds.<key>}``) that the chart's
templates replace with the values at render time, so what promtool tests is exactly what the
chart deploys. Their defaults (the dashboards' threshold lines) are read from the chart's
values.yaml, the one place they are written; this module only adds each key's unit and meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Final

import yaml

#: The chart the generators write into, relative to where they run (`make dashboards` runs them
#: from the repository root; ``qwen-npu dashboards --chart DIR`` names another).
DEFAULT_CHART: Final = Path("helm/qwen-npu")

# Where the chart keeps the values this module mirrors.
THRESHOLDS_VALUES_PATH: Final = "monitoring.prometheusRule.thresholds"
RUNBOOK_VALUES_PATH: Final = "monitoring.runbookBaseUrl"


def chart_threshold_defaults(values_file: Path) -> dict[str, float]:
    """``monitoring.prometheusRule.thresholds`` of the chart's values.yaml, and the startup alert's
    ``startupBudgetSeconds``: ``engine.startupBudgetSeconds``, the one budget, as the chart renders
    it."""
    try:
        values = yaml.safe_load(values_file.read_text())
        found = dict(values["monitoring"]["prometheusRule"]["thresholds"])
        found["startupBudgetSeconds"] = values["engine"]["startupBudgetSeconds"]
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise RuntimeError(
            f"{values_file}: cannot read monitoring.prometheusRule.thresholds ({exc}); run the "
            "dashboard and alert generators from a checkout's root, or pass --chart DIR"
        ) from exc
    return {key: float(value) for key, value in found.items()}


@dataclass(frozen=True)
class Threshold:
    """One tunable number an alert compares against (and the matching panels draw)."""

    key: str  # camelCase key under monitoring.prometheusRule.thresholds
    unit: str  # Grafana unit id of the quantity
    help: str
    default: float = 0.0  # from values.yaml (below)


_MEANINGS: tuple[Threshold, ...] = (
    Threshold(
        "startupBudgetSeconds",
        "s",
        "how long the engine may take from start to first ready (model load, graph capture)",
    ),
    Threshold("ttftP99Seconds", "s", "time-to-first-token SLO: p99 over 5 minutes"),
    Threshold("tpotP99Seconds", "s", "time-per-output-token SLO: p99 over 5 minutes"),
    Threshold("queueDepth", "short", "queued requests per engine that count as a backlog"),
    Threshold(
        "specAcceptLengthMin",
        "short",
        "mean accepted tokens per verify step below which MTP costs more than it gives",
    ),
    Threshold(
        "canaryDegenerationMax",
        "percentunit",
        "canary degeneration score (0..1) above which the output is garbled",
    ),
    Threshold("hbmUsedRatioMax", "percentunit", "used/total HBM ratio per chip"),
)


@cache
def thresholds_of(chart_dir: Path) -> MappingProxyType[str, Threshold]:
    """Each threshold's unit and meaning (here) with its default (the chart's values.yaml)."""
    values_file = chart_dir / "values.yaml"
    defaults = chart_threshold_defaults(values_file)
    unknown = sorted(set(defaults) ^ {t.key for t in _MEANINGS})
    if unknown:
        raise RuntimeError(
            f"{values_file}: monitoring.prometheusRule.thresholds and "
            f"qwen_npu/observability/config.py disagree on {', '.join(unknown)}: a threshold "
            "needs its value in values.yaml and its unit and meaning here"
        )
    return MappingProxyType(
        {t.key: Threshold(t.key, t.unit, t.help, defaults[t.key]) for t in _MEANINGS}
    )


THRESHOLD_KEYS: Final = tuple(t.key for t in _MEANINGS)


def threshold_placeholder(key: str) -> str:
    """The text the chart replaces with ``monitoring.prometheusRule.thresholds.<key>``."""
    if key not in THRESHOLD_KEYS:
        raise KeyError(f"unknown threshold {key!r}; known: {', '.join(THRESHOLD_KEYS)}")
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
    #: The chart whose values.yaml holds the thresholds' defaults (the dashboards' lines).
    chart_dir: Path = DEFAULT_CHART

    @property
    def thresholds(self) -> MappingProxyType[str, Threshold]:
        return thresholds_of(self.chart_dir)

    def runbook_url(self, alert_name: str) -> str:
        return self.runbook_url_pattern.format(base=self.runbook_base, anchor=alert_name.lower())

    def without_ranks(self) -> str:
        """``without (...)`` clause that folds an engine's TP/PP ranks into one series."""
        return "without (" + ", ".join(self.sglang_rank_labels) + ")"


DEFAULT: Final = Config()
