"""The poller's scheduling: run one step, sleep one interval, repeat; never die of a bug.

Why this exists: the health, info and canary loops differ only in their step and interval. Each
iteration runs the step, then sleeps ``interval_s`` once, so a step starts every interval plus the
step's own duration (a refused probe takes no time, a timed-out one its timeout). The sleep is
injected (``asyncio.sleep`` in the pod), so tests count steps against sleeps on a virtual clock
instead of waiting for wall-clock time; docs/chart.md's probe arithmetic rests on this cadence.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from qwen_npu.serve.sidecar.logs import RateLimiter, log

#: ``asyncio.sleep`` or a test's virtual sleep.
Sleep = Callable[[float], Awaitable[None]]
Step = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Loop:
    """One loop: its name (in logs and task names), its interval, its step."""

    name: str
    interval_s: float
    step: Step
    #: Sleep one interval before the first step (the canary: the engine is not ready at start).
    wait_first: bool = False


async def run_loop(
    loop: Loop,
    *,
    sleep: Sleep = asyncio.sleep,
    after_step: Callable[[], None] = lambda: None,
    errors_log: RateLimiter | None = None,
) -> None:
    """Run ``loop`` until cancelled: [sleep,] step, ``after_step()``, sleep, step, ...

    Exactly one sleep separates two steps. An exception of the step is logged (at most once a
    minute per loop) and the loop goes on; only cancellation ends it.
    """
    limiter = errors_log or RateLimiter(60.0)
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
                    action="report this line; the loop keeps running",
                )
        after_step()
        await sleep(loop.interval_s)


class Loops:
    """The running loops as asyncio tasks: ``start`` creates them, ``stop`` cancels and awaits."""

    def __init__(self, *, sleep: Sleep = asyncio.sleep) -> None:
        self.sleep = sleep
        self._tasks: list[asyncio.Task[None]] = []

    def start(
        self,
        loops: list[Loop],
        *,
        after_step: Callable[[], None] = lambda: None,
        errors_log: RateLimiter | None = None,
    ) -> None:
        self._tasks = [
            asyncio.create_task(
                run_loop(loop, sleep=self.sleep, after_step=after_step, errors_log=errors_log),
                name=f"sidecar-{loop.name}",
            )
            for loop in loops
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
