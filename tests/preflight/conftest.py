"""Fixtures for the preflight tests: synthetic checkpoints built by factory.py, and a CLI runner."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fixtures.checkpoints import write_checkpoint
from qwen_npu.preflight.cli import main

CLEAN_ENV = {
    "QWEN_NPU_DISABLE_PATCHES": "",
    "SGLANG_MAMBA_SSM_DTYPE": "",
    "QWEN_NPU_MIN_HDK_VERSION": "",
    "QWEN_NPU_DRIVER_VERSION_FILE": "",
}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start without the variables preflight reads; each test sets what it needs."""
    for name in CLEAN_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def ckpt_397b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The largest size, written once (about 280k description keys)."""
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "397b", "397B-A17B", vl=True)


@pytest.fixture(scope="session")
def ckpt_35b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The upstream pull request's checkpoint shape: 35B-A3B, W8A8_DYNAMIC main, FLOAT MTP."""
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "35b", "35B-A3B")


RunCli = Callable[..., tuple[int, Any, str]]


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> RunCli:
    """Run ``qwen-npu preflight`` in-process: (exit code, parsed JSON or stdout text, stderr)."""

    def run(*argv: str) -> tuple[int, Any, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, (json.loads(out) if "--json" in argv else out), err

    return run
