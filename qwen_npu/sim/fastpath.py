"""Requests stamped with their arrival (``stamped_protocol``); ``RawSend``, the generate fast path.

Under a burst of requests every microsecond of per-request work delays the next request's arrival
stamp, so POST /generate and the OpenAI routes skip FastAPI's routing and middleware: the body is
read here and handed to the same handler the FastAPI route uses (``app.state.fast_routes``).
Streams send with the server's undecorated ``send``, kept in the scope under ``RAW_SEND_KEY``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

from qwen_npu.sim.clock import ready_at

#: Where stamped_protocol's class leaves a request's arrival time in ``scope["state"]``.
ARRIVAL_KEY = "qwen_npu_sim_arrival"
#: Where RawSend leaves the server's own ``send`` in the scope (for EventStream).
RAW_SEND_KEY = "qwen_npu_sim.raw_send"

#: A generate handler: (request body, arrival time on the loop clock or None) -> response.
FastHandler = Callable[[bytes, "float | None"], Awaitable[Response]]


def arrival(scope: Scope) -> float | None:
    """The arrival time stamped on this request's scope, if any."""
    state = scope.get("state")
    return state.get(ARRIVAL_KEY) if isinstance(state, dict) else None


class RawSend:
    """Wraps the FastAPI app: generate routes by the fast path, everything else to FastAPI."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[RAW_SEND_KEY] = send
            fast: dict[tuple[str, str], FastHandler] = self.app.state.fast_routes
            handler = fast.get((scope["method"], scope["path"]))
            if handler is not None:
                chunks = []
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return  # the client left before the body arrived
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        break
                response = await handler(b"".join(chunks), arrival(scope))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def stamped_protocol() -> type:
    """uvicorn's HTTP protocol class (httptools when installed, else h11) stamping each request's
    scope with the time the loop's poll returned (``clock.ready_at``): under a burst, TTFT then
    counts from when the bytes arrived, not from when the request's handler got its turn."""
    base: Any
    try:
        # lazy: an extra's (pyproject.toml); the base install goes without
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base = HttpToolsProtocol
    except ImportError:  # httptools missing: the pure-Python parser
        # lazy: an extra's (pyproject.toml); the base install goes without
        from uvicorn.protocols.http.h11_impl import H11Protocol

        base = H11Protocol

    class StampedProtocol(base):  # type: ignore[misc]
        def data_received(self, data: bytes) -> None:
            t = ready_at() or self.loop.time()
            before = getattr(self, "scope", None)
            super().data_received(data)
            scope = getattr(self, "scope", None)
            if scope is not None and scope is not before and isinstance(scope.get("state"), dict):
                scope["state"][ARRIVAL_KEY] = t

    return StampedProtocol
