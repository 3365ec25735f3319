"""``/metrics``: prometheus_client's own ASGI app over the sidecar's private registry, cached.

Why this exists: the exposition format, content negotiation and gzip are prometheus_client's job,
not ours. This wrapper adds two things. It brings the clock-driven gauges (startup elapsed,
uptime) up to the moment of the scrape. And it replays the last rendered answer while nothing
changed: the page is re-rendered only when the monitor published new numbers or the cached page
is older than ``MAX_AGE_S``, so a burst of scrapes costs a dictionary lookup each instead of a
full render, and a scrape never sees numbers older than that. It is an ASGI class so Starlette
routes ``/metrics`` exactly, without a redirect to ``/metrics/``.
"""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import make_asgi_app
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from qwen_npu.serve.sidecar.monitor import Monitor

MAX_AGE_S = 1.0
_MAX_VARIANTS = 8  # distinct (query, Accept, Accept-Encoding) answers kept


@dataclass(frozen=True)
class _Rendered:
    version: int
    at: float
    messages: tuple[Message, ...]


def _variant(scope: Scope) -> tuple[bytes, bytes, bytes]:
    headers: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", ()):
        lower = name.lower()
        if lower in (b"accept", b"accept-encoding"):
            headers[lower] = headers.get(lower, b"") + b"," + value
    return (
        scope.get("query_string", b""),
        headers.get(b"accept", b""),
        headers.get(b"accept-encoding", b""),
    )


class MetricsEndpoint:
    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor
        self.app = make_asgi_app(registry=monitor.registry)
        self._cache: dict[tuple[bytes, bytes, bytes], _Rendered] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = _variant(scope)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit.version == self.monitor.version and now - hit.at < MAX_AGE_S:
            for message in hit.messages:
                await send(message)
            return
        self.monitor.refresh_time()
        version = self.monitor.version
        captured: list[MutableMapping[str, Any]] = []

        async def capture(message: Message) -> None:
            captured.append(message)
            await send(message)

        await self.app(scope, receive, capture)
        if len(self._cache) >= _MAX_VARIANTS:
            self._cache.clear()
        self._cache[key] = _Rendered(version, now, tuple(captured))


def route(monitor: Monitor) -> Route:
    return Route("/metrics", endpoint=MetricsEndpoint(monitor), methods=["GET"])
