"""`make perf-images`: the sidecar image's Python environment, measured without Docker.

The image must stay under 200 MB and start fast: this rebuilds its /opt/venv as
docker/sidecar.Dockerfile does (offline) and measures its size, the start to the first /livez 200
and the memory; with podman images from `make image-test`, their sizes too.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from qwen_npu import processes
from tools.paths import REPO
from tools.perf.report import run
from tools.perf.sidecar import rss_mb
from tools.versions import read_versions

# python:3.11-slim-bookworm, uncompressed, as `docker image ls` reports it (an estimate: the build
# machine measures the real image, docs/images.md checklist item 3).
BASE_IMAGE_MB_ESTIMATE = 130


def _run(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def build_env(root: Path) -> tuple[Path, dict[str, float]]:
    wheelhouse = REPO / ".venv-wheels" / "sidecar"
    if not (wheelhouse / ".complete").exists():
        sys.exit("perf-images: the wheelhouse is missing; run `make images-wheelhouse` first")
    env = os.environ | {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    offline = ["--no-index", "--find-links", str(wheelhouse), "-q"]
    timings = {}
    dist = root / "dist"
    timings["wheel build"] = _run(
        [sys.executable, "-m", "pip", "wheel", *offline, "--no-deps", "-w", str(dist), str(REPO)],
        env,
    )
    (wheel,) = dist.glob("qwen_npu-*.whl")
    venv = root / "venv"
    timings["venv"] = _run([sys.executable, "-m", "venv", str(venv)], env)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    constraints = REPO / "docker" / "sidecar-constraints.txt"
    timings["install"] = _run(
        [*pip, "install", *offline, "-c", str(constraints), f"{wheel}[sidecar]"], env
    )
    _run([*pip, "uninstall", "-q", "-y", "pip", "setuptools"], env)
    return venv, timings


def start_once(venv: Path) -> tuple[float, float]:
    """Seconds from spawn to the first /livez 200, and the RSS in MiB right after."""
    port = processes.free_port()
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "PYTHONDONTWRITEBYTECODE": "1",
        "QWEN_NPU_CANARY_INTERVAL_S": "0",
    }
    cmd = [str(venv / "bin" / "qwen-npu"), "sidecar", "--host", "127.0.0.1", "--port", str(port)]
    start = time.perf_counter()
    proc = processes.start(
        [*cmd, "--engine-url", f"http://127.0.0.1:{processes.free_port()}"],
        env=env,
        replace_env=True,
    )
    try:
        processes.wait_until(
            lambda: processes.http_status(f"http://127.0.0.1:{port}/livez", timeout=1) == 200,
            what="the sidecar's /livez",
            timeout_s=60,
            interval_s=0.01,
            proc=proc,
        )
        return time.perf_counter() - start, rss_mb(proc.pid)
    except (processes.WaitTimeout, processes.ProcessExited) as exc:
        sys.exit(f"perf-images: {str(exc).splitlines()[0]}")
    finally:
        processes.stop(proc)


def podman_figures() -> list[str]:
    """Sizes of the images `make image-test` built with podman (rows; none when not built)."""
    env = os.environ | {"CONTAINERS_CONF": str(REPO / "docker" / "podman" / "containers.conf")}

    def size(ref: str) -> int | None:
        done = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{.Size}}", ref],
            env=env,
            capture_output=True,
            text=True,
        )
        return int(done.stdout) if done.returncode == 0 and done.stdout.strip() else None

    if shutil.which("podman") is None:
        return ["| podman images | not built here (no podman: make image-test) |"]
    refs = dict(
        line.split("=", 1)
        for line in subprocess.run(
            ["make", "--no-print-directory", "-s", "-C", str(REPO), "image-refs"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        if "=" in line
    )
    versions = read_versions()
    base = size(
        f"docker.io/library/python:{versions['SIDECAR_PYTHON_VERSION']}-slim-"
        f"{versions['SIDECAR_DEBIAN_RELEASE']}"
    )
    rows = []
    for label, ref in (("sidecar", refs["sidecar"]), ("engine, cpu flavour", refs["engine-cpu"])):
        total = size(ref)
        if total is None or base is None:
            rows.append(f"| {label} image ({ref}) | not built (make image-test) |")
            continue
        rows.append(
            f"| {label} image ({ref}, podman) | {total / 1e6:.0f} MB; our layers add "
            f"{(total - base) / 1e6:.1f} MB to the stand-in base ({base / 1e6:.0f} MB) |"
        )
    return rows


def report() -> list[str]:
    with tempfile.TemporaryDirectory(prefix="perf-images-") as tmp:
        venv, timings = build_env(Path(tmp))
        files = [p for p in venv.rglob("*") if p.is_file()]
        size_mb = sum(p.stat().st_size for p in files) / 2**20
        site = next(venv.glob("lib/python*/site-packages"))
        biggest = sorted(
            (
                (sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) / 2**20, d.name)
                for d in site.iterdir()
                if d.is_dir() and not d.name.endswith(".dist-info")
            ),
            reverse=True,
        )[:5]
        starts = [start_once(venv) for _ in range(5)]
    livez, rss = zip(*starts, strict=True)
    lines = [
        "# Sidecar image environment (make perf-images)",
        "",
        f"Python {sys.version.split()[0]}; /opt/venv rebuilt offline like the sidecar Dockerfile.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| /opt/venv size | {size_mb:.1f} MiB ({len(files)} files) |",
        f"| image size estimate (python:3.11-slim-bookworm ~{BASE_IMAGE_MB_ESTIMATE} MB + venv) "
        f"| {BASE_IMAGE_MB_ESTIMATE + size_mb * 1.048576:.0f} MB (budget 200 MB) |",
        f"| largest packages | {', '.join(f'{n} {s:.1f} MiB' for s, n in biggest)} |",
        f"| spawn to first /livez 200 (median of {len(livez)}) | {statistics.median(livez):.2f} s "
        f"(min {min(livez):.2f}, max {max(livez):.2f}) |",
        f"| sidecar RSS after start (median) | {statistics.median(rss):.0f} MiB |",
        f"| wheel build / venv / install | {timings['wheel build']:.1f} s / {timings['venv']:.1f} s"
        f" / {timings['install']:.1f} s |",
        *podman_figures(),
        "",
    ]
    return lines


if __name__ == "__main__":
    sys.exit(run("images", report))
