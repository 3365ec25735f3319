"""``mtp-tune`` with a simulator profile whose config cannot be built: one line, exit 2, no run.

Issue 40 item 5: the profile was only looked up before the run; its config (the chart's render of
its engine flags) was first built while starting the simulators, so a missing or broken renders
file ended in a ConfigError traceback where ``qwen-npu sim`` says the same in one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qwen_npu.loadtest.tune import main
from qwen_npu.sim.chart_engine import ENV_RENDERS

CHART_BACKED = "qwen3.6-35b-a3b-910b-tp2-mtp"


def test_a_profile_whose_config_cannot_be_built_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "renders.json"
    broken.write_text("{not json")
    monkeypatch.setenv(ENV_RENDERS, str(broken))
    code = main(["--settings", "off 3", "--concs", "1", "--profile", CHART_BACKED,
                 "--output", str(tmp_path / "t.jsonl")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(broken) in err and ENV_RENDERS in err
    assert not (tmp_path / "t.jsonl").exists()
