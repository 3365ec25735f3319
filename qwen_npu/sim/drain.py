"""Drain on SIGTERM, as SGLang 0.5.23 does.

On SIGTERM SGLang's tokenizer manager sets ``gracefully_exit``: /health and /health_generate answer
503 from then on (and /ready too), requests already in flight finish, and a watchdog checks every
5 s how many remain, exiting once none do. It exits at once instead when the server is unhealthy
(its last health check failed) or ``SGL_FORCE_SHUTDOWN`` is set. The simulator does the same;
requests that still arrive while draining are served, as SGLang serves them (the router stops
sending once /health says 503). SIGINT still stops the server at once; SIGKILL kills it mid-stream.

The check interval is ``drain-check-interval-s`` of the config when it has that field, else the
environment variable ``QWEN_NPU_DRAIN_CHECK_S``, else 5 s (SGLang's); tests set it small.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from qwen_npu.log import PartLog
from qwen_npu.sim.state import Sim

log = PartLog("sim")

#: SGLang's watchdog period (seconds).
DEFAULT_CHECK_S = 5.0
CHECK_ENV = "QWEN_NPU_DRAIN_CHECK_S"
FORCE_ENV = "SGL_FORCE_SHUTDOWN"

#: How the drain ends the server: ``stop(exit_code)``.
Stop = Callable[[int], None]


def check_interval_s(sim: Sim) -> float:
    """How often the watchdog looks at the in-flight count (see the module docstring)."""
    configured = getattr(sim.cfg, "drain_check_interval_s", None)
    if configured:
        return float(configured)
    raw = os.environ.get(CHECK_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_CHECK_S
    except ValueError:
        log("error", "bad_env", name=CHECK_ENV, value=raw, next="a number of seconds > 0")
        return DEFAULT_CHECK_S
    return value if value > 0 else DEFAULT_CHECK_S


def force_shutdown() -> bool:
    """SGL_FORCE_SHUTDOWN set to a true value (SGLang's get_bool_env_var)."""
    return os.environ.get(FORCE_ENV, "false").strip().lower() in ("1", "true", "yes", "on")


class Drain:
    """Starts the drain on SIGTERM and calls ``stop`` once nothing is in flight.

    ``stop(code)``: 0 for a clean exit after the drain, 1 for a forced one.
    """

    def __init__(self, sim: Sim, stop: Stop) -> None:
        self.sim = sim
        self.stop = stop
        self.task: asyncio.Task[None] | None = None

    def begin(self) -> None:
        """Enter the draining state (runs on the event loop; a second SIGTERM changes nothing)."""
        sim = self.sim
        if sim.draining:
            log("warning", "sigterm_again", what="already draining", in_flight=sim.in_flight)
            return
        sim.draining = True
        log(
            "warning",
            "draining",
            in_flight=sim.in_flight,
            check_every_s=f"{check_interval_s(sim):g}",
            what="SIGTERM: /health now 503, in-flight requests finish, then exit 0",
        )
        self.task = asyncio.get_running_loop().create_task(self.watchdog())

    async def watchdog(self) -> None:
        sim = self.sim
        interval = check_interval_s(sim)
        while True:
            if sim.unhealthy:
                log("error", "forced_exit", reason="SIGTERM while the last health check failed")
                self.stop(1)
                return
            if force_shutdown():
                log("error", "forced_exit", reason=f"SIGTERM with {FORCE_ENV} set")
                self.stop(1)
                return
            if sim.in_flight <= 0:
                log("warning", "drained", what="no request in flight; exiting 0")
                self.stop(0)
                return
            log("info", "draining", in_flight=sim.in_flight)
            await asyncio.sleep(interval)
