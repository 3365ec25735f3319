"""Selectors, thresholds and conventions shared by every dashboard and alert.

The generated files hold ``${thresholds.<key>}`` placeholders that the chart fills from
``monitoring.prometheusRule.thresholds``, so what promtool tests is what the chart deploys; the
defaults (the dashboards' lines) are read from values.yaml; this module adds unit and meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Final

import yaml

#: Relative to where `make dashboards` runs them (the repository root); --chart names another.
DEFAULT_CHART: Final = Path("helm/qwen-npu")


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


#: The keys of ``monitoring.prometheusRule.thresholds`` (values.yaml says what each means) and the
#: startup alert's ``startupBudgetSeconds``.
THRESHOLD_KEYS: Final = (
    "startupBudgetSeconds", "ttftP99Seconds", "tpotP99Seconds", "queueDepth",
    "specAcceptLengthMin", "canaryDegenerationMax", "hbmUsedRatioMax",
)  # fmt: skip


@cache
def thresholds_of(chart_dir: Path) -> MappingProxyType[str, float]:
    """Each threshold's default in values.yaml (the dashboards' line)."""
    values_file = chart_dir / "values.yaml"
    defaults = chart_threshold_defaults(values_file)
    unknown = sorted(set(defaults) ^ set(THRESHOLD_KEYS))
    if unknown:
        raise RuntimeError(
            f"{values_file}: monitoring.prometheusRule.thresholds and "
            f"qwen_npu/observability/config.py disagree on {', '.join(unknown)}: a threshold "
            "needs its value in values.yaml and its key here"
        )
    return MappingProxyType({k: defaults[k] for k in THRESHOLD_KEYS})


def threshold_placeholder(key: str) -> str:
    """The text the chart replaces with ``monitoring.prometheusRule.thresholds.<key>``."""
    if key not in THRESHOLD_KEYS:
        raise KeyError(f"unknown threshold {key!r}; known: {', '.join(THRESHOLD_KEYS)}")
    return "${thresholds." + key + "}"


RUNBOOK_BASE_PLACEHOLDER: Final = "${runbookBaseUrl}"


@dataclass(frozen=True)
class Config:
    """Everything the generators read. One instance, ``DEFAULT``, is what ships."""

    rate_window: str = "5m"  # alert rate() windows
    # Labels that split one engine's sglang:* series, folded so that one engine is one series.
    sglang_rank_labels: tuple[str, ...] = (
        "tp_rank",
        "pp_rank",
        "moe_ep_rank",
        "engine_type",
        "is_streaming",
    )
    # The NPU exporter's series of the release's pods (kept by honor_labels: true).
    npu_selector: str = 'namespace="${release.namespace}"'
    # runbook_url = pattern with {base} and {anchor} (the lowercased alert name).
    runbook_url_pattern: str = "{base}#{anchor}"
    runbook_base: str = RUNBOOK_BASE_PLACEHOLDER
    #: The chart whose values.yaml holds the thresholds' defaults (the dashboards' lines).
    chart_dir: Path = DEFAULT_CHART

    @property
    def thresholds(self) -> MappingProxyType[str, float]:
        return thresholds_of(self.chart_dir)

    def runbook_url(self, alert_name: str) -> str:
        return self.runbook_url_pattern.format(base=self.runbook_base, anchor=alert_name.lower())

    def without_ranks(self) -> str:
        """``without (...)`` clause that folds an engine's TP/PP ranks into one series."""
        return "without (" + ", ".join(self.sglang_rank_labels) + ")"


DEFAULT: Final = Config()
