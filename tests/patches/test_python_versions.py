"""The drift guard and the start-up hook on every Python the engine can run, not only the venv's.

Why this exists: the engine image runs ENGINE_PYTHON_VERSION (3.12) while the test venv runs 3.11,
and a fingerprint built on ``ast.dump`` changed between them, so every patch reported ``drifted``
on the real image (issue 21). Each interpreter found on the machine (pyenv's versions, then PATH)
runs ``python_versions_child.py`` over SGLang 0.5.23's real source files from the venv: the pinned
fingerprints, the whole guard on the pinned defs (verbatim, cosmetically edited, changed by one
statement), and the ``.pth`` hook applying a patch in a fresh venv of that interpreter.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tools.paths import REPO
from tools.versions import read_versions

pytestmark = [pytest.mark.sglang]

HERE = Path(__file__).resolve().parent
#: The Python versions the engine can run (pyproject's requires-python >= 3.11, the CANN bases).
ENGINE_PYTHONS = ("3.11", "3.12", "3.13")


def _version_of(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


@functools.cache
def interpreters() -> dict[str, str]:
    """minor version ("3.12") -> an interpreter of it, for each of ENGINE_PYTHONS found."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found: dict[str, str] = {}
    for minor in ENGINE_PYTHONS:
        candidates = [str(p) for p in sorted(pyenv.glob(f"{minor}.*/bin/python{minor}"))]
        candidates += [c for c in [shutil.which(f"python{minor}")] if c]
        for python in candidates:
            version = _version_of(python)
            if version is not None and version.rsplit(".", 1)[0] == minor:
                found[minor] = python
                break
    return found


@functools.cache
def run_child(minor: str, work: str) -> dict[str, Any]:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin, "SGLang is not installed in the venv (make setup)"
    site = Path(spec.origin).parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "QWEN_NPU"))}
    done = subprocess.run(
        [interpreters()[minor], str(HERE / "python_versions_child.py"), str(REPO), str(site), work],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"Python {minor}: {done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def child(tmp_path_factory: pytest.TempPathFactory) -> Any:
    def get(minor: str) -> dict[str, Any]:
        return run_child(minor, str(tmp_path_factory.mktemp(f"py{minor}")))

    return functools.cache(get)


def test_interpreters_besides_the_venvs_are_found() -> None:
    venv = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = interpreters()
    engine = read_versions()["ENGINE_PYTHON_VERSION"]
    others = sorted(set(found) - {venv})
    assert others, f"no Python besides the venv's {venv} found (looked for {ENGINE_PYTHONS})"
    assert engine in found, f"the engine's Python {engine} not found; found {sorted(found)}"


@pytest.mark.parametrize("minor", sorted(interpreters()))
def test_pinned_fingerprints_verify(minor: str, child: Any) -> None:
    result = child(minor)
    assert result["version"].startswith(minor + ".")
    assert result["unpinned"] == [], f"patches without PINS: {result['unpinned']}"
    assert result["pins"], "no pins read"
    for row in result["pins"]:
        assert row["file"] == row["pinned"], (minor, row["qualname"])
        assert row["guard"] is None, (minor, row["guard"])


@pytest.mark.parametrize("minor", sorted(interpreters()))
def test_comments_and_docstrings_do_not_drift_code_does(minor: str, child: Any) -> None:
    for row in child(minor)["pins"]:
        assert row["guard_cosmetic"] is None, (minor, row["guard_cosmetic"])
        assert "source fingerprint" in (row["guard_changed"] or ""), (minor, row["qualname"])


@pytest.mark.parametrize("minor", sorted(interpreters()))
def test_pth_hook_applies_a_patch(minor: str, child: Any) -> None:
    hook = child(minor)["hook"]
    assert "error" not in hook, hook.get("error")
    assert hook["hook_installed"] is True
    assert (hook["state"], hook["active"], hook["all_float_mtp_config"]) == (
        "applied",
        True,
        "None",
    )
    assert any("event=patch.applied" in line for line in hook["log"]), hook["log"]


#: The verbs that run inside the engine image (the init container's preflight, the UB plan, the
#: patch list), each with the arguments to run it with; ``{ckpt}`` is a synthetic 35B checkpoint.
ENGINE_VERBS = (
    ("preflight", "--json", "--engine-args", "--model-path", "{ckpt}", "--tp-size", "2"),
    ("preflight", "{ckpt}", "--tp", "2", "--mamba-ssm-dtype", "bfloat16", "--json"),
    (
        "ub-plan",
        "--value-head-dim",
        "128",
        "--key-head-dim",
        "128",
        "--dtype",
        "bfloat16",
        "--json",
    ),
    ("patches", "list", "--json"),
)


def _run_verb(python: str, argv: list[str]) -> tuple[int, Any, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "QWEN_NPU"))}
    env["PYTHONPATH"] = str(REPO)  # the source tree alone: no venv package on the path
    done = subprocess.run(
        [python, "-s", "-m", "qwen_npu", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    try:
        parsed: Any = json.loads(done.stdout)
    except ValueError:
        parsed = done.stdout
    return done.returncode, parsed, done.stderr


@pytest.mark.parametrize("minor", sorted(interpreters()))
def test_engine_verbs_answer_the_same_on_each_python(
    minor: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Same exit code and JSON on the engine's Python as on the venv's, from the stdlib alone."""
    from fixtures.checkpoints import write_checkpoint

    ckpt = tmp_path_factory.getbasetemp() / "py-versions-35b"
    if not (ckpt / "config.json").exists():
        write_checkpoint(ckpt, "35B-A3B")
    for verb in ENGINE_VERBS:
        argv = [a.format(ckpt=ckpt) for a in verb]
        want = _run_verb(sys.executable, argv)
        got = _run_verb(interpreters()[minor], argv)
        assert want[0] in (0, 1), (argv, want[2][-2000:])
        assert (got[0], got[1]) == (want[0], want[1]), (minor, argv, got[2][-2000:])
