"""One versions file: the test venv runs its pins, and the sidecar Dockerfile takes its pins from it
(no default repeats one). The package's version is read from it at build time (pyproject.toml),
the images' tags by make, the chart's render from its appVersion (tests/helm)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import torch

from .dockerfile_parse import parse


def test_test_venv_runs_the_pinned_sglang_and_torch(versions: dict[str, str]) -> None:
    assert importlib.metadata.version("sglang") == versions["SGLANG_VERSION"]
    assert torch.__version__.split("+")[0] == versions["TEST_TORCH_VERSION"]


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
