"""``running_sim(**config)``: a simulator subprocess for tests, stopped whatever happens.

Keyword names are the config fields in snake_case (``ttft_ms=5``, typed as in YAML), plus
``profile=`` and ``config=``; starting, waiting and stopping are ``qwen_npu.processes``'s.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qwen_npu import processes
from qwen_npu.processes import free_port
from qwen_npu.sim.config import FIELDS


def _flag_args(config: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for name, value in config.items():
        key = name.replace("_", "-")
        if key not in FIELDS and key not in ("profile", "config"):
            raise TypeError(f"running_sim: unknown config key {name!r}")
        if isinstance(value, bool):
            value = str(value).lower()
        elif isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        if value is not None:
            args += [f"--{key}", str(value)]
    return args


@contextlib.contextmanager
def running_sim(**kwargs: Any) -> Iterator[str]:
    """``running_sim_process``, yielding the base URL alone."""
    with running_sim_process(**kwargs) as (url, _):
        yield url


@contextlib.contextmanager
def running_sim_process(
    *, startup_timeout_s: float = 30.0, env: dict[str, str] | None = None, **config: Any
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start the simulator on 127.0.0.1 (a free port unless ``port=``), yield (base URL, process).

    ``startup_timeout_s`` bounds the wait for the port (which opens at once, answering 503 during
    ``startup_delay_s``); the process's output tail is in the error when it exits early or does
    not listen in time. ``env`` adds environment variables.
    """
    port = int(config.pop("port", 0)) or free_port()
    flags = _flag_args({"host": "127.0.0.1", **config})
    cmd = [sys.executable, "-m", "qwen_npu", "sim", "--port", str(port), *flags]
    with (
        tempfile.TemporaryDirectory(prefix="qwen-npu-sim-") as tmp,
        processes.running(
            cmd,
            log=Path(tmp) / "sim.log",
            env=env,
            ready=lambda: processes.listening(port),
            what=f"qwen-npu sim on port {port}",
            timeout_s=startup_timeout_s,
        ) as proc,
    ):
        yield f"http://127.0.0.1:{port}", proc


def wait_ready(base_url: str, timeout_s: float = 30.0) -> None:
    """Poll /ready until 200 (after a simulated startup delay)."""
    processes.wait_http(base_url + "/ready", timeout_s=timeout_s)


__all__ = ["free_port", "running_sim", "running_sim_process", "wait_ready"]
