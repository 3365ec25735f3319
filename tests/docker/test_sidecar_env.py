"""The sidecar image's Python environment, rebuilt here in a fresh venv the way the Dockerfile
builds it: the wheel from this checkout, `pip install <wheel>[sidecar]` (the extra's own pins
from the wheel's metadata) held by docker/sidecar-constraints.txt (the extra's lock, compiled by
pip-tools), pip removed. Then `qwen-npu sidecar` starts from it, answers /livez, passes the
image's own HEALTHCHECK and writes nothing (read-only root file system).

Offline: the wheels come from .venv-wheels/sidecar, filled by `make images-wheelhouse` (a
prerequisite of `make test`).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwen_npu import processes

from .dockerfile_parse import parse

pytestmark = pytest.mark.slow  # rebuilds the sidecar environment from its wheels

# The image must stay under 200 MB; python:3.11-slim-bookworm is about 130 MB of it, so the venv
# gets what remains with a margin.
VENV_BUDGET_BYTES = 60 * 1024 * 1024


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip().strip('",')
        if "==" in line:
            name, _, version = line.partition("==")
            pins[_canon(name.split("[")[0])] = version.strip()
    return pins


def _offline_pip_env() -> dict[str, str]:
    # This machine's pip configuration (mirrors, constraints) stays out: only the wheelhouse.
    return os.environ | {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture(scope="module")
def sidecar_venv(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheelhouse = repo / ".venv-wheels" / "sidecar"
    if not (wheelhouse / ".complete").exists():
        pytest.fail(
            "the sidecar wheelhouse is missing: run `make images-wheelhouse` (make test does)"
        )
    tmp = tmp_path_factory.mktemp("sidecar-env")
    env = _offline_pip_env()
    offline = ["--no-index", "--find-links", str(wheelhouse), "-q"]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            *offline,
            "--no-deps",
            "-w",
            str(tmp / "dist"),
            str(repo),
        ],
        env=env,
        check=True,
        timeout=240,
    )
    (wheel,) = (tmp / "dist").glob("qwen_npu-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    constraints = repo / "docker" / "sidecar-constraints.txt"
    subprocess.run(
        [*pip, "install", *offline, "-c", str(constraints), f"{wheel}[sidecar]"],
        env=env,
        check=True,
        timeout=240,
    )
    subprocess.run(
        [*pip, "uninstall", "-q", "-y", "pip", "setuptools"], env=env, check=True, timeout=60
    )
    return venv


def _freeze(venv: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m\n"
        "for d in m.distributions(): print(d.metadata['Name'] + '==' + d.version)"
    )
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return _pins(out)


def _extra(repo: Path) -> dict[str, str]:
    pyproject = (repo / "pyproject.toml").read_text()
    match = re.search(r"^sidecar = \[(.*?)^\]", pyproject, re.M | re.S)
    assert match, "pyproject.toml lost its sidecar extra"
    return _pins(match.group(1))


def test_the_lock_is_compiled_from_the_sidecar_extra(repo: Path) -> None:
    """docker/sidecar-constraints.txt is pip-compile's lock of pyproject.toml's sidecar extra
    (`make sidecar-constraints`): it holds each of the extra's pins at the extra's version, so an
    extra changed without a new lock fails here, offline."""
    text = (repo / "docker" / "sidecar-constraints.txt").read_text()
    extra, locked = _extra(repo), _pins(text)
    assert "make sidecar-constraints" in text and len(locked) > len(extra) > 0
    assert {name: locked.get(name) for name in extra} == extra


def test_the_fresh_env_is_exactly_the_constraints_and_has_no_torch(
    repo: Path, sidecar_venv: Path, versions: dict[str, str]
) -> None:
    assert sys.version.startswith(versions["SIDECAR_PYTHON_VERSION"] + ".")
    installed = _freeze(sidecar_venv)
    locked = _pins((repo / "docker" / "sidecar-constraints.txt").read_text())
    assert installed.pop("qwen-npu") == versions["QWEN_NPU_VERSION"]
    assert installed == locked | _extra(repo)
    assert "torch" not in installed and "sglang" not in installed and "pip" not in installed


def test_the_env_fits_the_image_budget(sidecar_venv: Path) -> None:
    size = sum(p.stat().st_size for p in sidecar_venv.rglob("*") if p.is_file())
    assert size < VENV_BUDGET_BYTES, f"sidecar venv is {size / 2**20:.1f} MiB"


def _snapshot(root: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in root.rglob("*")}


@contextlib.contextmanager
def running_sidecar(sidecar_venv: Path, tmp_path: Path) -> Iterator[int]:
    """`qwen-npu sidecar` from the venv on a free 127.0.0.1 port, stopped at exit."""
    port = processes.free_port()
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    env = {
        "PATH": f"{sidecar_venv / 'bin'}:/usr/bin:/bin",
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": "/nonexistent",
        "QWEN_NPU_CANARY_INTERVAL_S": "0",
        "QWEN_NPU_SIDECAR_PORT": str(port),
    }
    cmd = [
        str(sidecar_venv / "bin" / "qwen-npu"),
        "sidecar",
        "--host",
        "127.0.0.1",
        "--engine-url",
        f"http://127.0.0.1:{processes.free_port()}",
    ]
    with processes.running(
        cmd,
        log=tmp_path / "sidecar.log",
        env=env,
        replace_env=True,
        cwd=workdir,
        ready_url=f"http://127.0.0.1:{port}/livez",
        what="the sidecar from the image's environment",
    ):
        yield port
    assert list(workdir.iterdir()) == []


def test_sidecar_starts_from_the_env_and_passes_the_image_healthcheck(
    repo: Path, sidecar_venv: Path, tmp_path: Path
) -> None:
    before = _snapshot(sidecar_venv)
    (check,) = parse(repo / "docker" / "sidecar.Dockerfile").stage("sidecar").all("HEALTHCHECK")
    probe = check.exec_form()
    assert probe and probe[0] == "python"
    python = str(sidecar_venv / "bin" / "python")

    with running_sidecar(sidecar_venv, tmp_path) as port:
        env = {"PATH": "/usr/bin:/bin", "QWEN_NPU_SIDECAR_PORT": str(port)}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5) as resp:
            assert resp.status == 200
        assert subprocess.run([python, *probe[1:]], env=env, timeout=30).returncode == 0
    # Stopped: the same probe now fails, so Docker would mark the container unhealthy.
    failed = subprocess.run([python, *probe[1:]], env=env, capture_output=True, timeout=30)
    assert failed.returncode != 0
    assert _snapshot(sidecar_venv) == before, "the sidecar wrote into its environment"


def _dockerfile_python_check(repo: Path, needle: str) -> str:
    """The code of the engine Dockerfile's `python3 -c "..."` build check containing needle."""
    final = parse(repo / "docker" / "engine.Dockerfile").stage("engine")
    for inst in final.all("RUN"):
        for code in re.findall(r'python3 -c "([^"]*)"', inst.args):
            if needle in code:
                return str(code)
    raise AssertionError(f"no python3 -c check with {needle!r} in the engine stage")


def test_the_wheel_carries_the_pth_hook_and_passes_the_engine_build_check(
    repo: Path, sidecar_venv: Path
) -> None:
    """Same wheel as the engine's `pip install /tmp/qwen-npu`: its .pth lands in site-packages and
    the engine Dockerfile's own check (run here unchanged) finds it."""
    code = _dockerfile_python_check(repo, "*.pth")
    python = str(sidecar_venv / "bin" / "python")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "qwen_npu_patches.pth" in done.stdout
    # The check fails where the hook is missing (this test venv of the checkout has it editable,
    # so use a bare interpreter without qwen-npu instead).
    bare = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code.replace("sysconfig.get_paths()['purelib']", "'/'")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bare.returncode != 0 and "the qwen-npu .pth hook is missing" in bare.stderr


def test_the_engine_sglang_version_check_passes_with_the_pinned_release(
    repo: Path, versions: dict[str, str]
) -> None:
    code = _dockerfile_python_check(repo, "m.version('sglang')")
    check = code.replace("${SGLANG_VERSION}", versions["SGLANG_VERSION"])
    assert subprocess.run([sys.executable, "-c", check], timeout=60).returncode == 0
    wrong = code.replace("${SGLANG_VERSION}", "0.0.1")
    assert subprocess.run([sys.executable, "-c", wrong], capture_output=True, timeout=60).returncode


def test_the_wheel_is_the_product_and_its_simulator_profiles_start_alone(
    sidecar_venv: Path, tmp_path: Path
) -> None:
    """The wheel carries no maintainer's tool (tools/candidate, its SGLang snapshot), and every
    profile `qwen-npu sim --list-profiles` names prints its config from the installed wheel
    alone: no checkout, no QWEN_NPU_CHART_RENDERS (the chart-backed ones read package data)."""
    import zipfile

    (wheel,) = (sidecar_venv.parent / "dist").glob("qwen_npu-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "qwen_npu/sim/profiles/chart-renders.json" in names
    assert not [n for n in names if "candidate" in n or "pinned_sglang" in n]
    env = {"PATH": f"{sidecar_venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    qwen_npu = str(sidecar_venv / "bin" / "qwen-npu")

    def sim(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [qwen_npu, "sim", *args], env=env, cwd=tmp_path, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip

    listed = sim("--list-profiles")
    assert listed.returncode == 0, listed.stderr
    profiles = listed.stdout.split()
    assert "fast-test" in profiles and "qwen3.6-35b-a3b-910b-tp2-mtp" in profiles
    for profile in profiles:
        shown = sim("--profile", profile, "--print-config")
        assert shown.returncode == 0, f"{profile}: {shown.stderr}"
        assert '"served-model-name"' in shown.stdout, profile
