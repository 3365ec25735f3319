"""KEDA autoscaling: the rendered ScaledObject, its bad values, and the decisions it leads to.

The decision model (tools/proofs/autoscaling_model.py) is the HPA's documented algorithm; the live
test drives
it with what Prometheus really answers for the chart's trigger queries while ``qwen-npu bench``
loads two simulator replicas at rising and falling load (tools/proofs/autoscaling.py).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest

from tools import chart
from tools.proofs.autoscaling import rendered_scaler, run_proof
from tools.proofs.autoscaling_model import PHASES, PROOF_VALUES, Hpa, Rules, Scaler, Trigger, table

from .conftest import render_error

QUEUE = Trigger("queue", "AverageValue", "q", 8.0)


def _scaler(**kw: Any) -> Scaler:
    base: dict[str, Any] = {
        "min_replicas": 1,
        "max_replicas": 4,
        "polling_s": 30.0,
        "triggers": (QUEUE,),
        "up": Rules(60.0, 1, 60.0),
        "down": Rules(120.0, 1, 60.0),
    }
    base.update(kw)
    return Scaler(**base)


def test_the_scaled_object_renders_and_validates() -> None:
    values = chart.values_from(chart.CI_DIR / "keda-values.yaml")
    docs = chart.render_docs(values)
    (so,) = chart.find(docs, "ScaledObject")
    assert not chart.find(docs, "HorizontalPodAutoscaler")
    assert "replicas" not in chart.engine_workload(docs)["spec"]  # KEDA owns the count
    for version in chart.KUBE_VERSIONS:
        assert chart.validate(so, version) == []
    scaler = Scaler.from_scaled_object(so)
    assert [t.name for t in scaler.triggers] == ["queue", "ttft-p90"]
    queue = scaler.triggers[0].query
    assert 'namespace="llm"' in queue and 'service="qwen-npu-engine"' in queue
    assert "${" not in queue + scaler.triggers[1].query
    # Sized for the start-up budget: one replica added per budget (capped at 30 min).
    budget = chart.merged_values(values)["engine"]["startupBudgetSeconds"]
    assert scaler.up.period_s == min(1800, int(budget))


def test_the_multi_node_target_is_the_leader_worker_set() -> None:
    values = chart.values_from(
        chart.PROFILES_DIR / "qwen3.5-397b-a17b-w8a8.yaml", chart.CI_DIR / "keda-values.yaml"
    )
    (so,) = chart.find(chart.render_docs(values), "ScaledObject")
    assert so["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"autoscaling": {"keda": {"enabled": True}}}, "autoscaling.keda.serverAddress"),
        (
            {"autoscaling": {"keda": {"enabled": True, "serverAddress": "http://p:9090",
                                      "ttft": {"enabled": True}}}},
            "autoscaling.keda.ttft.sloSeconds",
        ),
        (
            {"autoscaling": {"minReplicas": 0, "keda": {"enabled": True,
                                                         "serverAddress": "http://p:9090"}}},
            "autoscaling.minReplicas is 0",
        ),
        (
            {"autoscaling": {"enabled": True, "keda": {"enabled": True,
                                                        "serverAddress": "http://p:9090"}}},
            "autoscaling.enabled and autoscaling.keda.enabled",
        ),
    ],
)  # fmt: skip
def test_bad_values_fail_in_one_line_naming_the_value(values: dict[str, Any], names: str) -> None:
    message = render_error(values)
    assert names in message


def test_tolerance_and_average_value() -> None:
    hpa = Hpa(_scaler(), replicas=2)
    assert hpa.step(0, {"queue": 17.0}) == 2  # 17 / (8 * 2) = 1.06: inside the tolerance
    assert hpa.step(30, {"queue": None}) == 2  # no series = 0, but the scale-down waits


def test_one_busy_poll_does_not_scale_up() -> None:
    hpa = Hpa(_scaler(), replicas=1)
    decisions = [hpa.step(t, {"queue": q}) for t, q in ((30, 0.0), (60, 80.0), (90, 0.0))]
    assert decisions == [1, 1, 1]


def test_sustained_load_scales_up_one_replica_per_period_then_down_after_the_window() -> None:
    hpa = Hpa(_scaler(), replicas=1)
    assert hpa.step(0.0, {"queue": 0.0}) == 1  # a quiet poll in the window first
    up = [hpa.step(30.0 * i, {"queue": 80.0}) for i in range(1, 8)]
    assert up == [1, 2, 2, 3, 3, 4, 4]  # the window's lowest first, then +1 per 60 s, max 4
    down = [hpa.step(30.0 * i, {"queue": 0.0}) for i in range(8, 18)]
    assert down[:3] == [4, 4, 4]  # the highest of the last 120 s still asks for 4
    assert down[-1] == 1 and all(b - a >= -1 for a, b in itertools.pairwise([4, *down]))


def test_value_trigger_scales_with_the_ratio() -> None:
    slo = Trigger("ttft", "Value", "t", 2.0)
    hpa = Hpa(_scaler(triggers=(QUEUE, slo), up=Rules(0.0, 4, 60.0)), replicas=1)
    assert hpa.step(0, {"queue": 0.0, "ttft": 5.0}) == 3  # ceil(1 * 5 / 2)
    assert hpa.step(30, {"queue": 0.0, "ttft": math.nan}) == 3  # NaN = 0, scale-down waits


@pytest.mark.system
@pytest.mark.slow
def test_live_decisions_follow_the_load(tmp_path: Path) -> None:
    """Real Prometheus, two simulators, the bench: scale up under sustained load, not on a
    one-scrape spike, and back down after the load and the stabilisation window."""
    rows, scaler = run_proof(tmp_path)
    assert rendered_scaler(PROOF_VALUES)[0] == scaler
    print(table(rows, scaler))  # the note's table (pytest -s)
    by_phase: dict[str, list[Any]] = {}
    for row in rows:
        by_phase.setdefault(row.phase, []).append(row)
    assert len(rows) == sum(polls for _, _, polls in PHASES)
    spike = by_phase["spike"][0]
    assert spike.values["queue"] > scaler.triggers[0].threshold  # the spike was seen ...
    assert {r.replicas for r in by_phase["after the spike"]} == {1}  # ... and bought nothing
    sustained = by_phase["sustained"]
    assert all(r.values["queue"] > scaler.triggers[0].threshold for r in sustained)
    assert max(r.replicas for r in sustained) >= 2
    steps = [b.replicas - a.replicas for a, b in itertools.pairwise(rows)]
    assert max(steps) <= 1 and min(steps) >= -1  # one replica at a time, either way
    assert rows[-1].replicas == scaler.min_replicas and rows[-1].values["queue"] in (0.0, None)
