"""The probe arithmetic of docs/chart.md ("Probes: from a dead engine to a restart"), rendered.

The chart is rendered and the figures are computed from what it renders (the engine container's
liveness and startup probes, the sidecar's environment, the sidecar's own defaults where the chart
sets nothing); the docs' table must state exactly those figures. One value per layer: the
sidecar's liveness count is engine.livenessFailureThreshold, the kubelet's is the chart's own; the
startup budget is engine.startupBudgetSeconds everywhere it is used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest

from qwen_npu.sidecar.config import Settings
from tools import chart as chart_tool
from tools.paths import REPO

DOC = REPO / "docs" / "chart.md"
MARKER = "<!-- probe-arithmetic -->"


@dataclass(frozen=True)
class Probes:
    n: int  # sidecar: consecutive failed engine probes that fail /livez
    p: float  # sidecar: seconds between probes (sleep after each)
    t: float  # sidecar: timeout of one probe
    k: float  # kubelet: /livez period
    f: int  # kubelet: /livez failureThreshold

    def dead(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """(/livez fails, kubelet restarts) as (earliest, latest) seconds after the death."""
        livez = ((self.n - 1) * self.p, self.n * self.p)
        return livez, self._restart(livez)

    def hung(self) -> tuple[tuple[float, float], tuple[float, float]]:
        livez = (self.n * self.t + (self.n - 1) * self.p, self.n * (self.t + self.p))
        return livez, self._restart(livez)

    def _restart(self, livez: tuple[float, float]) -> tuple[float, float]:
        return livez[0] + (self.f - 1) * self.k, livez[1] + self.f * self.k


def _env(template: dict[str, Any], name: str) -> dict[str, str]:
    found = chart_tool.container(template, name)
    assert found is not None, name
    return {e["name"]: str(e.get("value")) for e in found.get("env", [])}


def probes_of(values: dict[str, Any]) -> Probes:
    """The probe figures of the pod the chart renders with ``values``."""
    template = chart_tool.engine_workload(chart_tool.render_docs(values))["spec"]["template"]
    engine = chart_tool.container(template, "engine")
    assert engine is not None
    env = _env(template, "sidecar")
    defaults = Settings.model_fields

    def setting(name: str) -> float:
        key = "QWEN_NPU_" + name.upper()
        return float(env[key]) if key in env else float(defaults[name].default)

    live = engine["livenessProbe"]
    assert live["httpGet"]["path"] == "/livez"
    return Probes(
        n=int(env["QWEN_NPU_LIVENESS_FAILURES"]),
        p=setting("poll_interval_s"),
        t=setting("health_timeout_s"),
        k=float(live["periodSeconds"]),
        f=int(live["failureThreshold"]),
    )


def documented() -> dict[str, list[tuple[float, float]]]:
    """Row name -> the (a .. b s) ranges of docs/chart.md's probe table."""
    text = DOC.read_text()
    assert MARKER in text, f"{DOC}: the marker {MARKER} is missing"
    rows: dict[str, list[tuple[float, float]]] = {}
    for line in text.split(MARKER, 1)[1].strip().splitlines():
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        ranges = re.findall(r"(\d+(?:\.\d+)?) \.\. (\d+(?:\.\d+)?) s", line)
        if ranges:
            rows[cells[0]] = [(float(a), float(b)) for a, b in ranges]
    return rows


def test_docs_state_the_dead_and_hung_engine_figures_of_the_rendered_chart() -> None:
    probes = probes_of({})
    assert (probes.n, probes.p, probes.t, probes.k, probes.f) == (3, 5.0, 10.0, 10.0, 2)
    rows = documented()
    assert rows["dead"] == list(probes.dead()), rows
    assert rows["hung"] == list(probes.hung()), rows
    assert probes.dead() == ((10.0, 15.0), (20.0, 35.0))
    assert probes.hung() == ((40.0, 45.0), (50.0, 65.0))


@pytest.mark.parametrize("failures", [1, 3, 5])
def test_liveness_failures_are_counted_once_by_the_sidecar_not_again_by_the_kubelet(
    failures: int,
) -> None:
    probes = probes_of({"engine": {"livenessFailureThreshold": failures}})
    assert probes.n == failures
    assert (probes.k, probes.f) == (10.0, 2)  # the kubelet's layer does not move with it
    assert probes.dead()[1][1] == failures * 5.0 + 2 * 10.0


def _startup_alert(docs: list[dict[str, Any]]) -> str:
    rule = chart_tool.find(docs, "PrometheusRule")[0]
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    (expr,) = [e for e in exprs if "qwen_npu_engine_startup_elapsed_seconds >" in e]
    return str(expr)


def _startup_panel_threshold(docs: list[dict[str, Any]]) -> Any:
    for cm in chart_tool.find(docs, "ConfigMap"):
        for text in cm.get("data", {}).values():
            if '"Startup elapsed"' not in text:
                continue
            for panel in json.loads(text)["panels"]:
                if panel.get("title") == "Startup elapsed":
                    return panel["fieldConfig"]["defaults"]["thresholds"]["steps"][-1]["value"]
    raise AssertionError("no Startup elapsed panel rendered")


@pytest.mark.parametrize("budget", [1800, 2400, 605])
def test_one_startup_budget_reaches_probe_sidecar_alert_panel_and_rollout(budget: int) -> None:
    values = {} if budget == 1800 else {"engine": {"startupBudgetSeconds": budget}}
    docs = chart_tool.render_docs(values)
    template = chart_tool.engine_workload(docs)["spec"]["template"]
    engine = chart_tool.container(template, "engine")
    assert engine is not None
    startup = engine["startupProbe"]
    allowed = startup["periodSeconds"] * startup["failureThreshold"]
    assert budget <= allowed <= budget + startup["periodSeconds"]
    assert _env(template, "sidecar")["QWEN_NPU_STARTUP_BUDGET_S"] == str(budget)
    assert f"> {budget})" in _startup_alert(docs)
    assert _startup_panel_threshold(docs) == budget
    deployment = chart_tool.engine_workload(docs)
    assert deployment["spec"]["progressDeadlineSeconds"] == budget + 600
