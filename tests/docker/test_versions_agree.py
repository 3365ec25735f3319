"""One versions file, four consumers: the Dockerfiles, the test venv, the chart, `make image`.
A test here fails when any of them disagrees with docker/versions.env."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
from pathlib import Path

import torch
import yaml

import qwen_npu

from .dockerfile_parse import parse


def test_test_venv_runs_the_pinned_sglang_and_torch(versions: dict[str, str]) -> None:
    assert importlib.metadata.version("sglang") == versions["SGLANG_VERSION"]
    assert torch.__version__.split("+")[0] == versions["TEST_TORCH_VERSION"]


def test_qwen_npu_version_is_the_distributions(versions: dict[str, str]) -> None:
    assert qwen_npu.__version__ == versions["QWEN_NPU_VERSION"]
    assert importlib.metadata.version("qwen-npu") == versions["QWEN_NPU_VERSION"]


def test_sidecar_dockerfile_pins_come_from_the_versions_file(
    repo: Path, versions: dict[str, str]
) -> None:
    """Declared without a default (the versions file is the one source), each checked when empty:
    the base reference names the empty argument, the last stage's first step the rest."""
    sidecar = parse(repo / "docker" / "sidecar.Dockerfile")
    declared, defaults = sidecar.every_arg(), sidecar.every_arg_default()
    for key in ("SIDECAR_PYTHON_VERSION", "SIDECAR_DEBIAN_RELEASE", "QWEN_NPU_VERSION"):
        assert key in versions and key in declared, key
    assert not [k for k in defaults if k in versions], "a versions.env pin repeated as a default"
    for stage in sidecar.stages:
        for key in ("SIDECAR_PYTHON_VERSION", "SIDECAR_DEBIAN_RELEASE"):
            assert f"${{{key}:-empty-arg-{key}-see-docker-versions.env}}" in stage.base
    first_run = sidecar.stage("sidecar").all("RUN")[0].args
    assert "require-build-args.sh sidecar.Dockerfile:sidecar QWEN_NPU_VERSION" in first_run


def _make_image_names(repo: Path) -> dict[str, str]:
    """The image references `make image` / `make image-sidecar` tag (dry run, no Docker)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    names = {}
    for target in ("image", "image-sidecar"):
        out = subprocess.run(
            ["make", "--no-print-directory", "-n", "-C", str(repo), target, "PLATFORM=linux/amd64"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        match = re.search(r" -t (\S+) \.", out)
        assert match, out
        names[target] = match.group(1)
    return names


def test_chart_appversion_and_image_tags_agree(repo: Path, versions: dict[str, str]) -> None:
    chart_dir = repo / "helm" / "qwen-npu"
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    assert str(chart["appVersion"]) == versions["QWEN_NPU_VERSION"]
    values = yaml.safe_load((chart_dir / "values.yaml").read_text())
    images = values["image"]
    names = _make_image_names(repo)
    for part, target in (("engine", "image"), ("sidecar", "image-sidecar")):
        tag = str(images[part]["tag"])
        assert tag == versions["QWEN_NPU_VERSION"], f"values.yaml image.{part}.tag"
        assert f"{images[part]['repository']}:{tag}" == names[target], (
            f"values.yaml image.{part} is not what make {target} builds ({names[target]})"
        )
