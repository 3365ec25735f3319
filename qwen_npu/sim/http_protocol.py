"""``stamped_protocol()``: uvicorn's HTTP protocol, stamping each request with its arrival time.

Under a burst of requests the handler of the last one runs only after the others'; stamping each
new request's scope with the time the loop's poll returned (``clock.ready_at``, the loop's own
clock) lets TTFT count from when the bytes arrived, as on a real server.
"""

from __future__ import annotations

from typing import Any

from qwen_npu.sim.clock import ready_at
from qwen_npu.sim.fastpath import ARRIVAL_KEY


def stamped_protocol() -> type:
    """uvicorn's HTTP protocol class (httptools when installed, else h11), stamping arrivals."""
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
