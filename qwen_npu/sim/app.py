"""The simulator's HTTP surface: SGLang 0.5.23's routes plus ``/sim/*``, assembled.

``create_app(cfg)`` builds the FastAPI app from the route modules (routes/), keeps the shared
state on ``app.state.sim`` (state.Sim) and the generate handlers on ``app.state.fast_routes`` for
the fast path (fastpath.RawSend). The other concepts live in their own modules: the SSE response
(stream), the drain on SIGTERM (drain) and the server (server); ``stamped_protocol`` below is
the uvicorn protocol the server runs it with. The names below stay importable from here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from qwen_npu.sim.clock import ready_at
from qwen_npu.sim.config import SimConfig
from qwen_npu.sim.fastpath import ARRIVAL_KEY, RawSend
from qwen_npu.sim.routes import generate, info, probes
from qwen_npu.sim.routes import sim as sim_routes
from qwen_npu.sim.state import Sim, crash
from qwen_npu.sim.stream import EventStream


def create_app(cfg: SimConfig) -> FastAPI:
    """The ASGI app for one simulator config (serve it wrapped in ``RawSend``)."""
    sim = Sim(cfg)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await sim.start()
        yield

    app = FastAPI(title="qwen-npu sim (SGLang-protocol simulator)", lifespan=lifespan)
    app.state.sim = sim
    handlers = generate.GenerateHandlers(sim)
    app.state.generate = handlers
    app.state.fast_routes = handlers.fast_routes()
    for module in (generate, probes, info, sim_routes):
        app.include_router(module.router)
    return app


def stamped_protocol() -> type:
    """uvicorn's HTTP protocol class (httptools when installed, else h11), stamping each request
    with its arrival time: under a burst the handler of the last request runs only after the
    others', and stamping its scope with the time the loop's poll returned (``clock.ready_at``,
    the loop's own clock) lets TTFT count from when the bytes arrived, as on a real server."""
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


__all__ = ["EventStream", "RawSend", "Sim", "crash", "create_app", "stamped_protocol"]
