"""The monitor: the trackers, the three steps that feed them, and the loops that run the steps.

The kubelet's probes and Prometheus' scrapes are answered in milliseconds from the trackers, also
while the engine hangs. Each loop runs its step, then sleeps ``interval_s`` once: a step starts
every interval plus the step's own duration (docs/chart.md's probe arithmetic rests on this).
Time is injected (``clock``, ``wall``, ``sleep``) so tests count steps on a virtual clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from qwen_npu.log import PartLog, RateLimiter
from qwen_npu.sidecar.canary import CanaryRunner
from qwen_npu.sidecar.config import Settings
from qwen_npu.sidecar.engine_client import EngineClient, EngineErrors
from qwen_npu.sidecar.health import HealthProbe, HealthTracker
from qwen_npu.sidecar.info import InfoReader, predict, stats_from_plan

log = PartLog("sidecar")

Sleep = Callable[[float], Awaitable[None]]  # asyncio.sleep or a test's virtual sleep


@dataclass(frozen=True)
class Loop:
    name: str
    interval_s: float
    step: Callable[[], Awaitable[None]]
    wait_first: bool = False  # the canary: the engine is not ready at start


async def run_loop(loop: Loop, *, sleep: Sleep = asyncio.sleep) -> None:
    """Run ``loop`` until cancelled: [sleep,] step, sleep, step, ...; a step's exception is logged
    (once a minute per loop) and the loop goes on."""
    limiter = RateLimiter(60.0)
    if loop.wait_first:
        await sleep(loop.interval_s)
    while True:
        try:
            await loop.step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not stop the loop that feeds the probes
            if limiter.allow(f"internal-{loop.name}"):
                log(
                    "error",
                    "poller_step_failed",
                    loop=loop.name,
                    error=repr(exc),
                    next="report this line; the loop keeps running",
                )
        await sleep(loop.interval_s)


class Monitor:
    """Owns the engine client, the trackers, the three steps and their loops."""

    def __init__(
        self,
        settings: Settings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self._transport = transport
        self._sleep = sleep
        self._tasks: list[asyncio.Task[None]] = []
        self.client: EngineClient | None = None

        self.health = HealthTracker(
            startup_budget_s=settings.startup_budget_s,
            liveness_failures=settings.liveness_failures,
            now=clock(),
        )
        self.errors = EngineErrors()
        self.predicted = predict(settings.model_dir, settings.tp_size, settings.mamba_ssm_dtype)
        self.ub_predicted = stats_from_plan(self.predicted.plan)
        view = (settings, self._engine, self.health, self.errors, clock)
        self.probe = HealthProbe(*view)
        self.info = InfoReader(*view)
        self.canary = CanaryRunner(*view, wall=wall)

    def loop_plan(self) -> list[Loop]:
        """The loops ``start`` runs: health and info at once, the canary after one interval."""
        s = self.settings
        loops = [
            Loop("health", s.poll_interval_s, self.probe),
            Loop("info", s.info_interval_s, self.info),
        ]
        if s.canary_enabled:
            loops.append(Loop("canary", s.canary_interval_s, self.canary, wait_first=True))
        return loops

    async def start(self) -> None:
        self.client = EngineClient(
            self.settings.engine_url,
            max_bytes=self.settings.max_response_bytes,
            api_key=self.settings.api_key(),
            transport=self._transport,
        )
        if self.predicted.error and self.settings.model_dir is not None:
            log(
                "warning",
                "ub_prediction_unavailable",
                error=self.predicted.error,
                next="fix QWEN_NPU_MODEL_DIR or QWEN_NPU_TP_SIZE; predicted plan stays unknown",
            )
        self._tasks = [
            asyncio.create_task(run_loop(loop, sleep=self._sleep), name=f"sidecar-{loop.name}")
            for loop in self.loop_plan()
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    def _engine(self) -> EngineClient:
        if self.client is None:
            raise RuntimeError("monitor not started")
        return self.client
