"""Every rule group (alerts and recordings), in the order the rule file lists them."""

from __future__ import annotations

from qwen_npu.observability import (
    alerts_engine,
    alerts_npu,
    alerts_output,
    alerts_patches,
    alerts_router,
    alerts_slo,
)
from qwen_npu.observability.rules import Alert, AlertGroup, Recording

GROUPS: tuple[AlertGroup, ...] = (
    alerts_engine.GROUP,
    alerts_slo.GROUP,
    alerts_output.GROUP,
    alerts_patches.GROUP,
    alerts_npu.GROUP,
    alerts_router.GROUP,
)


def all_alerts() -> tuple[Alert, ...]:
    return tuple(a for g in GROUPS for a in g.alerts)


def by_name() -> dict[str, Alert]:
    return {a.name: a for a in all_alerts()}


def all_recordings() -> tuple[Recording, ...]:
    return tuple(r for g in GROUPS for r in g.recordings)
