"""The simulator's HTTP surface: SGLang 0.5.23's routes plus ``/sim/*``, assembled.

``create_app(cfg)`` builds the FastAPI app from the route modules (routes/), keeps the shared
state on ``app.state.sim`` (state.Sim) and the generate handlers on ``app.state.fast_routes`` for
the fast path (fastpath.RawSend). The other concepts live in their own modules: the SSE response
(stream), the arrival-stamping uvicorn protocol (http_protocol), the drain on SIGTERM (drain) and
the server (server). The names below stay importable from here for existing callers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from qwen_npu.sim.config import SimConfig
from qwen_npu.sim.fastpath import RawSend
from qwen_npu.sim.http_protocol import stamped_protocol
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


__all__ = ["EventStream", "RawSend", "Sim", "crash", "create_app", "stamped_protocol"]
