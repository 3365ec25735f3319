"""The shape of one metric declaration, shared by every list of metrics the project knows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricKind = Literal["gauge", "counter", "histogram", "info"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric; ``name`` as Prometheus stores it (a histogram's is its base name)."""

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    unit: str = ""  # Grafana unit id for panels: "s", "bytes", "percentunit", "short", "reqps", ...

    def series_names(self) -> tuple[str, ...]:
        if self.kind == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)
