"""The shape of an alert and of a recording rule, and how groups of them become rule YAML.

An alert's ``expr`` and ``description`` are ``%(name)s`` templates (PromQL's own braces and
Prometheus' ``{{ $labels.x }}`` templates pass through untouched). The names they may use are the
config's helpers (``window``, ``without_ranks``, ``npu``) and the threshold keys the alert declares
in ``needs``; using an undeclared key, or declaring one the config lacks, is an error at generation
time. ``runbook_url`` is never written by hand: it comes from the config's pattern and the
lowercased alert name (the anchor of the alert's section in docs/runbook.md).

A ``Recording`` is a quantity defined once in PromQL (``record:`` a ``level:metric:operations``
name, Prometheus' convention): dashboards and alerts read the recorded series instead of
repeating the expression, so a panel and the alert that watches it cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from qwen_npu.observability.config import Config, threshold_placeholder

Severity = Literal["warning", "critical"]


class AlertDefinitionError(ValueError):
    """An alert uses or needs something the config does not provide."""


@dataclass(frozen=True)
class Alert:
    name: str  # CamelCase, prefixed QwenNpu; its lowercase form is the runbook anchor
    severity: Severity
    for_: str  # Prometheus duration, "0m" for none
    summary: str  # static one-liner
    description: str  # templated with $labels / $value, and %(threshold)s
    expr: str  # PromQL with %(helper)s / %(threshold)s
    needs: tuple[str, ...] = ()  # threshold keys used by expr/description


@dataclass(frozen=True)
class Recording:
    record: str  # level:metric:operations, e.g. qwen_npu:spec_accept_length:rate10m
    expr: str  # PromQL with %(helper)s (no thresholds: a recorded series is a fact, not a verdict)
    help: str  # what the series means (docs, and the generator's metric list)
    unit: str = "short"  # Grafana unit id of the quantity

    def series_names(self) -> tuple[str, ...]:
        return (self.record,)


@dataclass(frozen=True)
class AlertGroup:
    name: str
    alerts: tuple[Alert, ...] = ()
    recordings: tuple[Recording, ...] = ()


class _Fields(Mapping[str, str]):
    """The names an alert's templates may use; refuses threshold keys the alert did not declare."""

    def __init__(self, cfg: Config, alert: Alert | Recording) -> None:
        self._alert = alert
        self._cfg = cfg
        self._helpers = {
            "window": cfg.rate_window,
            "without_ranks": cfg.without_ranks(),
            "npu": cfg.npu_selector,
        }

    def __getitem__(self, key: str) -> str:
        if key in self._helpers:
            return self._helpers[key]
        if key not in self._needs:
            raise AlertDefinitionError(
                f"{self._what} uses %({key})s but does not declare it in needs="
            )
        return threshold_placeholder(key)

    @property
    def _needs(self) -> tuple[str, ...]:
        return self._alert.needs if isinstance(self._alert, Alert) else ()

    @property
    def _what(self) -> str:
        a = self._alert
        return f"alert {a.name}" if isinstance(a, Alert) else f"recording {a.record}"

    def __iter__(self) -> Iterator[str]:
        return iter([*self._helpers, *self._needs])

    def __len__(self) -> int:
        return len(self._helpers) + len(self._needs)


def render_recording(recording: Recording, cfg: Config) -> dict[str, object]:
    try:
        expr = recording.expr % _Fields(cfg, recording)
    except (KeyError, ValueError, TypeError) as exc:
        raise AlertDefinitionError(f"recording {recording.record}: bad template ({exc})") from exc
    return {"record": recording.record, "expr": " ".join(expr.split())}


def render_alert(alert: Alert, cfg: Config) -> dict[str, object]:
    missing = [key for key in alert.needs if key not in cfg.thresholds]
    if missing:
        raise AlertDefinitionError(
            f"alert {alert.name} needs threshold(s) {', '.join(missing)} that the config does "
            "not define; add them to qwen_npu/observability/config.py"
        )
    fields = _Fields(cfg, alert)
    try:
        expr = alert.expr % fields
        description = alert.description % fields
    except (KeyError, ValueError, TypeError) as exc:
        raise AlertDefinitionError(f"alert {alert.name}: bad template ({exc})") from exc
    return {
        "alert": alert.name,
        "expr": " ".join(expr.split()),
        "for": alert.for_,
        "labels": {"severity": alert.severity},
        "annotations": {
            "summary": alert.summary,
            "description": " ".join(description.split()),
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
                # Recordings first: in a group, rules run in order, so an alert of the group
                # reads the value recorded in the same evaluation.
                "rules": [render_recording(r, cfg) for r in g.recordings]
                + [render_alert(a, cfg) for a in g.alerts],
            }
            for g in groups
        ]
    }
