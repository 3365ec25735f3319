"""The simulator's packaged chart renders (qwen_npu/sim/profiles/chart-renders.json) are derived
data: equal to a fresh render of the chart today, so a chart or profile change that forgot
`make sim-renders` fails here, not in a wheel user's `qwen-npu sim`."""

from __future__ import annotations

from pathlib import Path

from qwen_npu.sim.chart_engine import PACKAGED
from tools.chart import sim_renders


def test_the_packaged_renders_equal_a_fresh_render(tmp_path: Path) -> None:
    fresh = sim_renders.write(tmp_path / "fresh.json").read_text(encoding="utf-8")
    assert '"renders": {\n  "' in fresh  # at least one chart-backed profile rendered
    assert PACKAGED.read_text(encoding="utf-8") == fresh, "stale: run `make sim-renders`"
