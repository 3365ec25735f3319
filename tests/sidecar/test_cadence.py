"""The poller's cadence on a virtual clock: one step per interval, counted, never timed.

The loops' sleep and the monitor's clock are injected. ``VirtualTime`` hands the loops a sleep that
parks them until the test advances the clock to their wake-up time; the test waits (for an event,
not for time) until every loop is parked, wakes the earliest one, and repeats. So ten virtual
minutes take milliseconds and the step counts are exact: with the defaults the health probe runs
every 5 s, the info read every 15 s, the canary every 60 s. (A loop that slept twice per step
would show half the counts.)
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
from collections.abc import Awaitable, Callable

import httpx
import pytest

from qwen_npu.sidecar.config import load_settings
from qwen_npu.sidecar.monitor import Loop, Monitor, run_loop
from tests.sidecar.conftest import FakeEngine

#: How long the test waits for the loops to park (an event; generous for a loaded machine).
PARK_TIMEOUT_S = 60.0


class VirtualTime:
    """A clock and a sleep for ``sleepers`` concurrent loops; time moves only in ``run_until``."""

    def __init__(self, sleepers: int) -> None:
        self.now = 0.0
        self.sleepers = sleepers
        self.slept: list[float] = []
        self._parked: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._changed = asyncio.Event()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._parked, (self.now + seconds, next(self._seq), wake))
        self._changed.set()
        await wake

    async def _all_parked(self) -> None:
        while len(self._parked) < self.sleepers:
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), PARK_TIMEOUT_S)

    async def run_until(self, end: float) -> None:
        """Wake the loops in time order until the next wake-up is after ``end``; then all park."""
        while True:
            await self._all_parked()
            due, _, wake = self._parked[0]
            if due > end:
                self.now = end
                return
            heapq.heappop(self._parked)
            self.now = due
            wake.set_result(None)


@pytest.fixture(autouse=True)
def _default_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults, whatever QWEN_NPU_* variables the test process inherited."""
    for key in list(os.environ):
        if key.startswith("QWEN_NPU_"):
            monkeypatch.delenv(key)


def _run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_one_loop_sleeps_once_per_step_also_when_the_step_fails() -> None:
    async def scenario() -> None:
        vt = VirtualTime(sleepers=1)
        steps: list[float] = []

        async def step() -> None:
            steps.append(vt.now)
            if len(steps) % 2:
                raise RuntimeError("a bug in the step")  # logged, and the loop goes on

        task = asyncio.create_task(run_loop(Loop("x", 5.0, step), sleep=vt.sleep))
        await vt.run_until(60.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert steps == [5.0 * i for i in range(13)]  # 0, 5, ..., 60
        assert vt.slept == [5.0] * 13  # one sleep after each step, none before the first

    _run(scenario)


def test_a_waiting_loop_sleeps_before_its_first_step() -> None:
    async def scenario() -> None:
        vt = VirtualTime(sleepers=1)
        steps: list[float] = []

        async def step() -> None:
            steps.append(vt.now)

        loop = Loop("canary", 60.0, step, wait_first=True)
        task = asyncio.create_task(run_loop(loop, sleep=vt.sleep))
        await vt.run_until(600.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert steps == [60.0 * i for i in range(1, 11)]

    _run(scenario)


def test_default_cadence_probe_5s_info_15s_canary_60s() -> None:
    """Ten virtual minutes of the monitor with the default intervals, engine healthy."""

    async def scenario() -> None:
        settings = load_settings()
        assert (settings.poll_interval_s, settings.info_interval_s) == (5.0, 15.0)
        assert settings.canary_interval_s == 60.0
        fake = FakeEngine()
        vt = VirtualTime(sleepers=3)
        monitor = Monitor(
            settings,
            transport=httpx.MockTransport(fake.handle),
            clock=vt.clock,
            sleep=vt.sleep,
        )
        await monitor.start()
        try:
            await vt.run_until(0.0)  # the first health probe and info read, at t = 0
            assert monitor.health.ready()
            before = dict(fake.calls)
            await vt.run_until(600.0)
            calls = {path: fake.calls.get(path, 0) - before.get(path, 0) for path in fake.calls}
        finally:
            await monitor.stop()
        # In (0, 600]: probes at 5, 10, ..., 600; info at 15, ..., 600; canary at 60, ..., 600.
        assert calls["/health_generate"] == 120
        assert calls["/server_info"] == 40
        assert "/metrics" not in calls  # acceptance is the chart's recording rules
        assert calls["/generate"] == 10
        assert sorted(set(vt.slept)) == [5.0, 15.0, 60.0]

    _run(scenario)


def test_a_refused_engine_fails_liveness_after_n_probes_n_minus_1_intervals_apart() -> None:
    """The sidecar half of docs/chart.md's dead-engine arithmetic, on the virtual clock."""

    async def scenario() -> None:
        settings = load_settings(canary_interval_s=0)
        n, every = settings.liveness_failures, settings.poll_interval_s
        fake = FakeEngine()
        vt = VirtualTime(sleepers=2)
        monitor = Monitor(
            settings, transport=httpx.MockTransport(fake.handle), clock=vt.clock, sleep=vt.sleep
        )
        await monitor.start()
        try:
            await vt.run_until(100.0)
            assert monitor.health.liveness(vt.now).ok
            fake.refuse = True  # the engine dies just after the probe at t = 100
            failed_at = None
            for t in range(101, 200):
                await vt.run_until(float(t))
                if not monitor.health.liveness(vt.now).ok:
                    failed_at = t
                    break
        finally:
            await monitor.stop()
        # Refusals at 105, 110, 115: /livez fails with the n-th, n intervals after the death.
        assert failed_at == 100 + n * every

    _run(scenario)
