"""When did the bytes arrive? A selector that notes when each poll of the event loop returned.

A burst of readable sockets is handled one callback after another, after whatever the previous
loop iteration left to run; stamping each with the time the poll returned keeps that queue out of
the timings. The simulator stamps request arrivals with it (TTFT counts from there), and the perf
client stamps event arrivals with it. The clock is ``time.monotonic``, the event loop's clock.
"""

from __future__ import annotations

import asyncio
import selectors
import time

_READY_AT = [0.0]


class StampingSelector(selectors.DefaultSelector):
    """The default selector, noting when each poll returned."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(timeout)
        _READY_AT[0] = time.monotonic()
        return ready


def ready_at() -> float:
    """When the current loop iteration's poll returned (0.0 before the first poll)."""
    return _READY_AT[0]


def new_loop() -> asyncio.AbstractEventLoop:
    """An asyncio event loop polling through StampingSelector."""
    return asyncio.SelectorEventLoop(StampingSelector())
