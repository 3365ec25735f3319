"""``qwen-npu oncall``: flags checked before any helm command; the chart found from any folder.

Issue 40 item 13: ``mtp-off --timeout -5 --release "bad name!"`` reached ``helm upgrade``, and the
default ``--chart helm/qwen-npu`` was relative to the current folder (from elsewhere helm read it
as a repository reference): the verb now requires --chart (the package does not look for the
checkout), and make hands it the checkout's chart by absolute path. The recording stand-ins for
helm and kubectl say what ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.paths import CHART_DIR, REPO

from .stand_ins import calls, install


def _oncall(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qwen_npu", "oncall", *args],
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--timeout", "-5"], "--timeout"),
        (["--timeout", "0s"], "--timeout"),
        (["--timeout", "soon"], "--timeout"),
        (["--release", "bad name!"], "--release"),
        (["--release", "r" * 54], "--release"),
        (["--namespace", "Bad_NS"], "--namespace"),
        (["--helm", "helm --kube-context 'a"], "--helm"),  # an unbalanced quote
        (["--kubectl", " "], "--kubectl"),
    ],
)
def test_bad_flags_stop_before_any_helm_call(tmp_path: Path, args: list[str], flag: str) -> None:
    env = dict(install(tmp_path / "bin"))
    done = _oncall(env, tmp_path, "mtp-off", "--chart", str(CHART_DIR), *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("qwen-npu oncall: error: argument " + flag)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert calls(env) == []


def test_the_verb_requires_a_chart_to_upgrade_with(tmp_path: Path) -> None:
    env = dict(install(tmp_path / "bin"))
    done = _oncall(env, tmp_path, "mtp-off")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("qwen-npu oncall: error: mtp-off: set --chart")
    assert calls(env) == []


def test_make_passes_the_checkouts_chart_from_any_folder(tmp_path: Path) -> None:
    env = dict(install(tmp_path / "bin"))
    elsewhere = tmp_path / "somewhere-else"
    elsewhere.mkdir()
    base = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "mtp-off"],
        env=base | env,
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    upgrade = calls(env)[0]
    assert upgrade[:4] == ["helm", "upgrade", "qwen-npu", str(CHART_DIR)]
    assert Path(upgrade[3]).is_absolute() and (Path(upgrade[3]) / "Chart.yaml").is_file()
