"""The shape of one metric declaration, shared by every list of metrics the project knows.

Two lists use it: ``metrics/sglang.py`` (SGLang's own ``sglang:*`` names, which the simulator
exports and dashboards query) and ``metrics/catalogue.py`` (the sidecar's ``qwen_npu_*`` metrics).
Dashboards, alerts and tests read those lists, so a renamed metric breaks a test, not a dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricKind = Literal["gauge", "counter", "histogram", "info"]


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric.

    ``name`` is the series name as Prometheus stores it: counters end in ``_total``; a histogram's
    name is its base (``_bucket``, ``_sum`` and ``_count`` follow from it).
    """

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    unit: str = ""  # Grafana unit id for panels: "s", "bytes", "percentunit", "short", "reqps", ...
    #: Why the metric is going and what replaces it; dashboards and alerts may not read it.
    deprecated: str = ""

    @property
    def exposed_help(self) -> str:
        """The HELP line: the help, led by the deprecation note when there is one."""
        return f"DEPRECATED: {self.deprecated}. {self.help}" if self.deprecated else self.help

    def series_names(self) -> tuple[str, ...]:
        """Every series name this metric produces in the exposition format."""
        if self.kind == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)
