"""podman for the image tests: the CLI with the project's containers.conf, the images `make
image-test` builds, and their metadata.

Why it exists: the images are built by make (the same targets and Dockerfiles as on a Docker host),
the tests only run and inspect them. A missing podman or image is a failure naming the make target
that provides it, never a skip (issue 18).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tools.paths import REPO

CONTAINERS_CONF = REPO / "docker" / "podman" / "containers.conf"


def podman_env() -> dict[str, str]:
    return os.environ | {"CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(
    *args: str, timeout: float = 300, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """One podman command (long-lived processes go through qwen_npu.processes)."""
    exe = shutil.which("podman")
    if exe is None:
        pytest.fail("podman is missing: run `make image-test` (it installs podman with apt-get)")
    return subprocess.run(
        [exe, *args], env=podman_env(), capture_output=True, text=True, timeout=timeout, check=check
    )


def chart_images() -> dict[str, dict[str, Any]]:
    """values.yaml's image blocks, an empty tag as the chart renders it (its appVersion)."""
    chart = REPO / "helm" / "qwen-npu"
    images = yaml.safe_load((chart / "values.yaml").read_text())["image"]
    assert isinstance(images, dict)
    app_version = str(yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"])
    return {
        name: {**block, "tag": block["tag"] or app_version}
        for name, block in images.items()
        if isinstance(block, dict)  # pullSecrets is a list beside the image blocks
    }


def make_refs() -> dict[str, str]:
    """The references `make image-sidecar`, `make image` and `make image-engine-cpu` tag."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(
        ["make", "--no-print-directory", "-s", "-C", str(REPO), "image-refs"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    refs = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert set(refs) == {"sidecar", "engine", "engine-cpu"}, out
    return refs


def require_image(ref: str, target: str) -> dict[str, Any]:
    """The image's `podman image inspect` record; a failure naming the make target without it."""
    done = podman("image", "inspect", ref, timeout=60)
    if done.returncode != 0:
        pytest.fail(f"image {ref} is not built: run `make image-test` (make {target})")
    (record,) = json.loads(done.stdout)
    assert isinstance(record, dict)
    return record


def remove_container(name: str) -> None:
    podman("rm", "--force", "--time", "0", name, timeout=120)
