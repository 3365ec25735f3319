"""The kill switches' last step, run for real: the `python3 -c ...` that `make mtp-off` sends into
the sidecar container (kubectl stand-in executing it here) against a real `qwen-npu sidecar` on
127.0.0.1, in front of the SGLang-protocol simulator or of nothing."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make

from qwen_npu import processes
from qwen_npu.processes import free_port
from qwen_npu.sim.testing import running_sim

from .stand_ins import install

# Slow: starts sidecar processes; test-fast keeps the other oncall tests.
pytestmark = pytest.mark.slow


@contextlib.contextmanager
def sidecar(engine_url: str) -> Iterator[int]:
    """`qwen-npu sidecar` on a free port of 127.0.0.1, stopped at exit."""
    port = free_port()
    env = {"QWEN_NPU_CANARY_INTERVAL_S": "0", "QWEN_NPU_POLL_INTERVAL_S": "0.2"}
    cmd = [sys.executable, "-m", "qwen_npu", "sidecar", "--host", "127.0.0.1", "--port", str(port)]
    with processes.running(
        [*cmd, "--engine-url", engine_url],
        env=env,
        ready_url=f"http://127.0.0.1:{port}/livez",
        what="qwen-npu sidecar",
    ):
        yield port


def wait_for(port: int, path: str, code: int) -> None:
    processes.wait_until(
        lambda: processes.http_status(f"http://127.0.0.1:{port}{path}") == code,
        what=f"{path} never returned {code}",
    )


def test_mtp_off_completes_when_the_sidecar_is_ready(repo: Path, tmp_path: Path) -> None:
    with running_sim(ttft_ms=5, itl_ms=1) as engine, sidecar(engine) as port:
        wait_for(port, "/readyz", 200)  # what `kubectl wait --for=condition=Ready` stands for
        env = install(tmp_path / "bin") | {"ONCALL_EXEC_LOCAL": "1"}
        done = make(repo, env, "mtp-off", f"SIDECAR_PORT={port}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "/readyz 200" in done.stdout
    assert "mtp-off: done, release qwen-npu in default is ready" in done.stdout


def test_a_not_ready_sidecar_fails_the_switch_in_one_line(repo: Path, tmp_path: Path) -> None:
    with sidecar(f"http://127.0.0.1:{free_port()}") as port:
        wait_for(port, "/readyz", 503)
        env = install(tmp_path / "bin") | {"ONCALL_EXEC_LOCAL": "1"}
        done = make(repo, env, "rollback", f"SIDECAR_PORT={port}")
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "/readyz 503" in out
    assert "rollback: the sidecar's /readyz says not ready; next: make status" in out
    assert "Traceback" not in out
    assert "done, release" not in out


def test_no_sidecar_at_all_is_one_line_too(repo: Path, tmp_path: Path) -> None:
    env = install(tmp_path / "bin") | {"ONCALL_EXEC_LOCAL": "1"}
    done = make(repo, env, "status", f"SIDECAR_PORT={free_port()}")
    assert done.returncode != 0
    lines = [line for line in done.stdout.splitlines() if line.startswith("/status")]
    assert len(lines) == 1 and lines[0].startswith("/status 0 ")
    assert "Traceback" not in done.stdout + done.stderr
