"""promtool (Debian's prometheus package) on the rules exactly as the chart renders them:
`check rules`, then `test rules` with the unit tests under rules/, and a check that those unit
tests cover every alert both ways (fires after `for:`, quiet before it) with full annotations."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_npu.observability import alerts

from .conftest import RULE_TESTS

pytestmark = pytest.mark.system  # needs a tool `make test` installs (docs: make test-fast)

TEST_FILES = sorted(RULE_TESTS.glob("*_test.yaml"))


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_promtool_check_rules(promtool: str, rules_file: Path) -> None:
    proc = _run([promtool, "check", "rules", str(rules_file)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rules = len(alerts.all_alerts()) + len(alerts.all_recordings())
    assert f"SUCCESS: {rules} rules found" in proc.stdout


def _with_rules(test_file: Path, rules_file: Path, tmp_path: Path) -> Path:
    doc = yaml.safe_load(test_file.read_text())
    assert doc["rule_files"] == ["RULES_FILE"], f"{test_file.name}: rule_files must be RULES_FILE"
    doc["rule_files"] = [str(rules_file)]
    out = tmp_path / test_file.name
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


@pytest.mark.parametrize("test_file", TEST_FILES, ids=[p.stem for p in TEST_FILES])
def test_promtool_unit_tests(
    promtool: str, rules_file: Path, tmp_path: Path, test_file: Path
) -> None:
    proc = _run([promtool, "test", "rules", str(_with_rules(test_file, rules_file, tmp_path))])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_unit_tests_can_fail(promtool: str, rules_file: Path, tmp_path: Path) -> None:
    """A wrong expectation is caught: the suite above is not vacuous."""
    doc = yaml.safe_load((RULE_TESTS / "npu_test.yaml").read_text())
    doc["rule_files"] = [str(rules_file)]
    exp = doc["tests"][0]["alert_rule_test"][-1]["exp_alerts"][0]
    exp["exp_annotations"]["runbook_url"] += "-typo"
    path = tmp_path / "broken_test.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = _run([promtool, "test", "rules", str(path)])
    assert proc.returncode != 0 and "FAILED" in proc.stdout + proc.stderr


def _cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for path in TEST_FILES:
        for test in yaml.safe_load(path.read_text())["tests"]:
            cases += test.get("alert_rule_test", [])
    return cases


def _seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return int(duration[:-1]) * units[duration[-1]]


@pytest.mark.parametrize("alert", [a.name for a in alerts.all_alerts()])
def test_every_alert_is_tested_on_both_sides_of_for(alert: str) -> None:
    spec = {a.name: a for a in alerts.all_alerts()}[alert]
    cases = [c for c in _cases() if c["alertname"] == alert]
    firing = [c for c in cases if c["exp_alerts"]]
    quiet = [c for c in cases if not c["exp_alerts"]]
    assert firing, f"{alert}: no case where it fires"
    if _seconds(spec.for_) > 0:
        assert quiet, f"{alert}: no case before its for: {spec.for_} has elapsed"
    for case in firing:
        for exp in case["exp_alerts"]:
            assert exp["exp_labels"]["severity"] == spec.severity
            assert set(exp["exp_annotations"]) == {"summary", "description", "runbook_url"}
            assert exp["exp_annotations"]["summary"] == spec.summary
            assert exp["exp_annotations"]["runbook_url"].endswith("#" + alert.lower())
