"""``running_sim(**config)``: a simulator subprocess for tests, stopped whatever happens.

Other parts' tests (sidecar, load test, observability) build on this: it picks a free port on
127.0.0.1, starts ``python -m qwen_npu sim`` with the given config as flags, waits until the port
answers, yields the base URL and always stops the process. Keyword names are the config fields in
snake_case (``ttft_ms=5``); values are typed as in YAML. Starting, waiting and stopping are
``qwen_npu.processes``'s; this module only turns a config into a command line.
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
    the port opens at once and answers 503 until ready). The process's output is kept in a
    temporary file and its tail shown in the error if it exits early (``ProcessExited``) or
    does not listen in time (``WaitTimeout``). ``env`` adds environment variables.
    """
    port = int(config.pop("port", 0)) or free_port()
    config.setdefault("host", "127.0.0.1")
    cmd = [sys.executable, "-m", "qwen_npu", "sim", "--port", str(port), *_flag_args(config)]
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
