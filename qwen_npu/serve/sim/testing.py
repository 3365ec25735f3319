"""``running_sim(**config)``: a simulator subprocess for tests, stopped whatever happens.

Other parts' tests (sidecar, load test, observability) build on this: it picks a free port on
127.0.0.1, starts ``python -m qwen_npu sim`` with the given config as flags, waits until the port
answers, yields the base URL and always terminates the process (then kills it if it lingers).
Keyword names are the config fields in snake_case (``ttft_ms=5``); values are typed as in YAML.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from qwen_npu.serve.sim.config import FIELDS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _flag_args(config: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for name, value in config.items():
        key = name.replace("_", "-")
        if key in ("profile", "config"):
            args += [f"--{key}", str(value)]
            continue
        if key not in FIELDS:
            raise TypeError(f"running_sim: unknown config key {name!r}")
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        args += [f"--{key}", str(value)]
    return args


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def running_sim(
    *,
    startup_timeout_s: float = 30.0,
    env: dict[str, str] | None = None,
    **config: Any,
) -> Iterator[str]:
    """Start the simulator, yield ``http://127.0.0.1:<port>``, stop it at exit.

    See ``running_sim_process`` (which also yields the process) for the arguments.
    """
    with running_sim_process(startup_timeout_s=startup_timeout_s, env=env, **config) as (url, _):
        yield url


@contextlib.contextmanager
def running_sim_process(
    *,
    startup_timeout_s: float = 30.0,
    env: dict[str, str] | None = None,
    **config: Any,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start the simulator, yield (base URL, process), stop it at exit.

    ``startup_timeout_s`` bounds the wait for the port (not the simulated ``startup_delay_s``:
    the port opens at once and answers 503 until ready). The process's stderr is kept in a
    temporary file and shown in the error if it exits early. ``env`` adds environment variables.
    """
    port = int(config.pop("port", 0)) or free_port()
    config.setdefault("host", "127.0.0.1")
    cmd = [sys.executable, "-m", "qwen_npu", "sim", "--port", str(port), *_flag_args(config)]
    child_env = {**os.environ, **(env or {})}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=log, env=child_env, stdin=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + startup_timeout_s
            while not _listening(port):
                if proc.poll() is not None:
                    log.seek(0)
                    out = log.read().decode(errors="replace")
                    raise RuntimeError(f"qwen-npu sim exited {proc.returncode} at start:\n{out}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"qwen-npu sim did not listen on {port} in time")
                time.sleep(0.02)
            yield f"http://127.0.0.1:{port}", proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)


def wait_ready(base_url: str, timeout_s: float = 30.0) -> None:
    """Poll /ready until 200 (after a simulated startup delay)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(base_url + "/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{base_url}/ready did not answer 200 in {timeout_s} s")
        time.sleep(0.02)


__all__ = ["free_port", "running_sim", "running_sim_process", "wait_ready"]
