"""The app factory: builds the FastAPI app, its monitor and its routers; nothing else.

Why this exists: ``create_app(settings)`` is what the CLI serves and what tests build (with a fake
engine transport when they need one). The monitor's loops run inside the app's ``lifespan``, so
they start with the server and stop with it, and importing this module starts nothing and writes
nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

from qwen_npu import __version__
from qwen_npu.serve.sidecar.config import Settings
from qwen_npu.serve.sidecar.logs import log
from qwen_npu.serve.sidecar.monitor import Monitor
from qwen_npu.serve.sidecar.routes import health, metrics, status


def create_app(settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    monitor = Monitor(settings, transport=transport)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log("info", "sidecar_start", version=__version__, settings=settings.public_dict())
        await monitor.start()
        try:
            yield
        finally:
            await monitor.stop()
            log("info", "sidecar_stop")

    app = FastAPI(
        title="qwen-npu sidecar",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.settings = settings
    app.state.monitor = monitor
    app.include_router(health.router)
    app.include_router(status.router)
    app.router.routes.append(metrics.route(monitor))
    return app
