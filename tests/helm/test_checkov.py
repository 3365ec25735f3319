"""checkov (--skip-download) on every rendered scenario: no failed check, each skip with a reason.

The number of skips is not pinned: a checkov upgrade that adds a check the chart already skips by
annotation changes it, and no reader acts on it (the chart README quotes it as measured).

checkov lives in its own venv (.venv-checkov, `make checkov-venv`, a prerequisite of `make test`).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools import chart as chart_tool

pytestmark = pytest.mark.system  # needs a tool `make test` installs (docs: make test-fast)

CHECKOV = chart_tool.REPO / ".venv-checkov" / "bin" / "checkov"


def _run_checkov(directory: Path) -> dict[str, Any]:
    assert CHECKOV.exists(), f"{CHECKOV} is missing: run `make checkov-venv`"
    proc = subprocess.run(
        [
            str(CHECKOV),
            "--skip-download",
            "--framework",
            "kubernetes",
            "--output",
            "json",
            "--directory",
            str(directory),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.stdout, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    if isinstance(report, list):
        (report,) = [r for r in report if r.get("check_type") == "kubernetes"]
    return dict(report)


def test_should_fail_no_check_when_checkov_scans_rendered_manifests(
    tmp_path: Path, rendered_scenarios: dict[str, list[dict[str, Any]]]
) -> None:
    for name, docs in rendered_scenarios.items():
        text = "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)
        (tmp_path / f"{name}.yaml").write_text(text)
    report = _run_checkov(tmp_path)
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']})"
        for c in report["results"]["failed_checks"]
    ]
    assert failed == []
    summary = report["summary"]
    assert summary["parsing_errors"] == 0
    assert summary["passed"] > 1000
    # Every skip carries its reason.
    skipped = report["results"]["skipped_checks"]
    assert skipped and summary["skipped"] == len(skipped)
    assert all(len(c["check_result"].get("suppress_comment", "")) > 20 for c in skipped)
    # A check that fails is reported: an engine without its skips fails CKV_K8S_11 and more.
    engine = chart_tool.engine_workload(rendered_scenarios["ci-default"])
    del engine["metadata"]["annotations"]
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "engine.yaml").write_text(yaml.safe_dump(engine))
    bare_failed = {c["check_id"] for c in _run_checkov(bare)["results"]["failed_checks"]}
    assert {"CKV_K8S_11", "CKV_K8S_40", "CKV_K8S_43"} <= bare_failed
