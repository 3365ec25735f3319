"""When did the bytes arrive? A selector that estimates it at each poll of the event loop.

A burst of readable sockets is handled one callback after another; stamping each with the poll's
estimate (``time.monotonic``, the loop's clock) keeps that queue out of the simulator's TTFT and the
perf client's timings.
"""

from __future__ import annotations

import asyncio
import selectors
import time

_READY_AT = [0.0]
BLOCKED_S = 0.0002  # a poll that took longer than this waited for the bytes it reports


class StampingSelector(selectors.DefaultSelector):
    """The default selector, estimating when the bytes it reports arrived: when a poll that
    blocked returned, else the middle of the busy interval since the previous poll returned."""

    def __init__(self) -> None:
        super().__init__()
        self._prev_return = time.monotonic()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        called = time.monotonic()
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(timeout)
        returned = time.monotonic()
        if returned - called > BLOCKED_S:
            _READY_AT[0] = returned
        else:
            _READY_AT[0] = (self._prev_return + called) / 2
        self._prev_return = returned
        return ready


def ready_at() -> float:
    """The estimated arrival of what the current loop iteration's poll reported (0.0 before)."""
    return _READY_AT[0]


def new_loop() -> asyncio.AbstractEventLoop:
    """An asyncio event loop polling through StampingSelector."""
    return asyncio.SelectorEventLoop(StampingSelector())
