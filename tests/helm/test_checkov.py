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
from tools.paths import REPO

pytestmark = pytest.mark.system  # needs a tool `make test` installs (docs: make test-fast)

CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
BARE = "negative-control-engine-without-skips"


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
            "--compact",  # no code blocks in the report: its JSON encoding was 3/4 of the run
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


def _first_time(doc: dict[str, Any], seen: set[str]) -> bool:
    key = json.dumps(doc, sort_keys=True)
    if key in seen:
        return False
    seen.add(key)
    return True


def test_should_fail_no_check_when_checkov_scans_rendered_manifests(
    tmp_path: Path, rendered_scenarios: dict[str, list[dict[str, Any]]]
) -> None:
    # Each distinct object once (628 rendered objects are 81 distinct ones): checkov judges an
    # object by its content, so a copy adds no verdict, only time. A scenario's file holds the
    # objects it is the first to render; every object of every scenario is scanned.
    seen: set[str] = set()
    for name, docs in rendered_scenarios.items():
        first = [d for d in docs if _first_time(d, seen)]
        if first:
            text = "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in first)
            (tmp_path / f"{name}.yaml").write_text(text)
    # The negative control, in the same run (a checkov start costs some 6 s): an engine without
    # its skip annotations must fail CKV_K8S_11 and more.
    engine = chart_tool.engine_workload(rendered_scenarios["ci-default"])
    del engine["metadata"]["annotations"]
    (tmp_path / f"{BARE}.yaml").write_text(yaml.safe_dump(engine))
    report = _run_checkov(tmp_path)
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']})"
        for c in report["results"]["failed_checks"]
        if BARE not in c["file_path"]
    ]
    assert failed == []
    summary = report["summary"]
    assert summary["parsing_errors"] == 0
    assert summary["passed"] > 500
    # Every skip carries its reason.
    skipped = report["results"]["skipped_checks"]
    assert skipped and summary["skipped"] == len(skipped)
    assert all(len(c["check_result"].get("suppress_comment", "")) > 20 for c in skipped)
    bare_failed = {
        c["check_id"] for c in report["results"]["failed_checks"] if BARE in c["file_path"]
    }
    assert {"CKV_K8S_11", "CKV_K8S_40", "CKV_K8S_43"} <= bare_failed
