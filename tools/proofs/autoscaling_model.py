"""What KEDA (through the HPA it owns) would decide, poll by poll, from Prometheus' real answers.

Why: there is no cluster here, and no library evaluates the HPA's documented algorithm (Kubernetes
"Horizontal Pod Autoscaling", algorithm details and scaling behaviour; KEDA's Prometheus scaler)
on live values. ``Hpa`` is that algorithm: per trigger ``ceil(V / T)`` replicas for an
``AverageValue`` target, ``ceil(current * V / T)`` for a ``Value`` one, unchanged inside the 0.1
tolerance (no series = 0, ``ignoreNullValues``); the largest trigger wins; the stabilisation
windows bound a scale-up by the lowest and a scale-down by the highest recent recommendation; each
``Pods`` policy limits the change per period; the result is clamped to [min, max]. The live proof
(tools/proofs/autoscaling.py, ``make autoscaling``, tests/helm/test_autoscaling_keda.py) feeds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

TOLERANCE = 0.1


@dataclass(frozen=True)
class Trigger:
    name: str
    metric_type: str  # "AverageValue" | "Value"
    query: str
    threshold: float


@dataclass(frozen=True)
class Rules:
    """One direction of the HPA's behaviour."""

    window_s: float
    pods: int
    period_s: float


@dataclass(frozen=True)
class Scaler:
    """What the rendered ScaledObject says."""

    min_replicas: int
    max_replicas: int
    polling_s: float
    triggers: tuple[Trigger, ...]
    up: Rules
    down: Rules

    @classmethod
    def from_scaled_object(cls, doc: dict[str, Any]) -> Scaler:
        spec = doc["spec"]
        behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]

        def rules(part: dict[str, Any]) -> Rules:
            (policy,) = [p for p in part["policies"] if p["type"] == "Pods"]
            return Rules(
                float(part["stabilizationWindowSeconds"]),
                int(policy["value"]),
                float(policy["periodSeconds"]),
            )

        triggers = tuple(
            Trigger(
                t.get("name", t["type"]),
                t.get("metricType", "AverageValue"),
                t["metadata"]["query"],
                float(t["metadata"]["threshold"]),
            )
            for t in spec["triggers"]
        )
        return cls(
            int(spec["minReplicaCount"]),
            int(spec["maxReplicaCount"]),
            float(spec.get("pollingInterval", 30)),
            triggers,
            rules(behavior["scaleUp"]),
            rules(behavior["scaleDown"]),
        )


def trigger_replicas(trigger: Trigger, value: float | None, current: int) -> int:
    """The replica count one trigger asks for (before stabilisation and limits)."""
    value = 0.0 if value is None or math.isnan(value) else value
    average = trigger.metric_type == "AverageValue"  # else "Value": the whole, not per replica
    if trigger.threshold <= 0:
        return current
    ratio = value / (trigger.threshold * (current if average else 1))
    if abs(ratio - 1.0) <= TOLERANCE:
        return current
    return math.ceil(value / trigger.threshold) if average else math.ceil(current * ratio)


@dataclass
class Hpa:
    """The HPA KEDA owns, fed one poll at a time."""

    scaler: Scaler
    replicas: int
    _recommendations: list[tuple[float, int]] = field(default_factory=list)
    _events: list[tuple[float, int]] = field(default_factory=list)  # (time, +added / -removed)

    def step(self, now: float, values: dict[str, float | None]) -> int:
        s = self.scaler
        wanted = max(trigger_replicas(t, values.get(t.name), self.replicas) for t in s.triggers)
        self._recommendations.append((now, wanted))
        up = min(r for t, r in self._recommendations if t > now - s.up.window_s or t == now)
        down = max(r for t, r in self._recommendations if t > now - s.down.window_s or t == now)
        target = min(max(self.replicas, up), down)
        if target > self.replicas:
            added = sum(n for t, n in self._events if n > 0 and t > now - s.up.period_s)
            target = min(target, self.replicas + max(0, s.up.pods - added))
        elif target < self.replicas:
            removed = -sum(n for t, n in self._events if n < 0 and t > now - s.down.period_s)
            target = max(target, self.replicas - max(0, s.down.pods - removed))
        target = max(s.min_replicas, min(s.max_replicas, target))
        if target != self.replicas:
            self._events.append((now, target - self.replicas))
        self.replicas = target
        keep = max(s.up.window_s, s.down.window_s, s.up.period_s, s.down.period_s)
        self._recommendations = [(t, r) for t, r in self._recommendations if t > now - keep]
        return target


#: (phase, bench concurrency per replica (0 = no load), polls): rising and falling load, with a
#: one-scrape spike first. The polls of a phase are consecutive KEDA polls (virtual time).
PHASES: tuple[tuple[str, int, int], ...] = (
    ("idle", 0, 2),
    ("spike", 24, 1),
    ("after the spike", 0, 2),
    ("rising", 4, 2),
    ("sustained", 12, 5),
    ("falling", 2, 2),
    ("idle again", 0, 9),
)

#: Values the proof renders the chart with: production shapes, windows sized so that a few polls
#: cover them (the algorithm is the same at any scale).
PROOF_VALUES: dict[str, Any] = {
    "autoscaling": {
        "minReplicas": 1,
        "maxReplicas": 4,
        "scaleDownStabilizationSeconds": 120,
        "keda": {
            "enabled": True,
            "serverAddress": "http://127.0.0.1:9090",
            "pollingInterval": 30,
            "scaleUpStabilizationSeconds": 60,
            "scaleUpPeriodSeconds": 60,
            "queue": {"targetPerReplica": 4},
            "ttft": {"enabled": True, "sloSeconds": 1, "window": "15s"},
        },
    }
}


@dataclass
class Row:
    phase: str
    concurrency: int
    time_s: float
    values: dict[str, float | None]
    replicas: int


def table(rows: list[Row], scaler: Scaler) -> str:
    names = [t.name for t in scaler.triggers]
    head = "| phase | bench CONC per replica | poll time (s) | " + " | ".join(names)
    lines = [head + " | replicas chosen |", "|---|---|---|" + "---|" * len(names) + "---|"]
    for r in rows:
        vals = " | ".join("-" if r.values.get(n) is None else f"{r.values[n]:.3g}" for n in names)
        lines.append(f"| {r.phase} | {r.concurrency} | {r.time_s:.0f} | {vals} | {r.replicas} |")
    return "\n".join(lines) + "\n"
