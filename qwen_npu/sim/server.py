"""``serve(cfg)``: run the simulator under uvicorn until SIGINT, or SIGTERM and SGLang's drain.

uvicorn stops at once on SIGTERM and re-raises the signal; ``DrainingServer`` runs SGLang 0.5.23's
drain instead (docs/simulator.md). On SIGINT the engine ends the streams in flight first
(``Engine.stop_all``): uvicorn's graceful shutdown would wait for them, then cancel each with a
traceback.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import FrameType

import uvicorn
from fastapi import FastAPI
from prometheus_client import disable_created_metrics

from qwen_npu.log import PartLog
from qwen_npu.ports import cannot_listen
from qwen_npu.sim.clock import new_loop
from qwen_npu.sim.config import SimConfig
from qwen_npu.sim.fastpath import RawSend, stamped_protocol
from qwen_npu.sim.generate import GenerateHandlers, add_routes
from qwen_npu.sim.routes import router
from qwen_npu.sim.state import Sim

log = PartLog("sim")

CHECK_ENV = "QWEN_NPU_DRAIN_CHECK_S"
FORCE_ENV = "SGL_FORCE_SHUTDOWN"


def _forced() -> bool:
    """``SGL_FORCE_SHUTDOWN`` set true (SGLang's get_bool_env_var)."""
    return os.environ.get(FORCE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _check_interval_s() -> float:
    """SGLang's watchdog period, 5 s, or ``QWEN_NPU_DRAIN_CHECK_S``'s (tests)."""
    raw = os.environ.get(CHECK_ENV, "")
    try:
        value = float(raw or 5.0)
    except ValueError:
        log("error", "bad_env", name=CHECK_ENV, value=raw, next="a number of seconds > 0")
        return 5.0
    return value if value > 0 else 5.0


def create_app(cfg: SimConfig) -> FastAPI:
    """The ASGI app for one simulator config (serve it wrapped in ``RawSend``)."""
    sim = Sim(cfg)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await sim.start()
        yield

    app = FastAPI(title="qwen-npu sim (SGLang-protocol simulator)", lifespan=lifespan)
    app.state.sim = sim
    add_routes(app, GenerateHandlers(sim))
    app.include_router(router)
    return app


class DrainingServer(uvicorn.Server):
    """uvicorn's server; SIGTERM starts the drain (exit 0 once nothing is in flight, 1 when
    forced), SIGINT ends the requests in flight first."""

    def __init__(self, config: uvicorn.Config, sim: Sim) -> None:
        super().__init__(config)
        self.sim = sim
        self.exit_code = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)  # type: ignore[arg-type]

    def stop(self, code: int) -> None:
        """End the server: 0 after a drain (graceful), else at once."""
        self.exit_code = code
        self.should_exit = True
        if code:
            self.force_exit = True

    def drain(self) -> None:
        """Enter the draining state (runs on the event loop; a second SIGTERM changes nothing)."""
        sim = self.sim
        if sim.draining:
            log("warning", "sigterm_again", what="already draining", in_flight=sim.in_flight)
            return
        sim.draining = True
        log(
            "warning",
            "draining",
            in_flight=sim.in_flight,
            check_every_s=f"{_check_interval_s():g}",
            what="SIGTERM: /health now 503, in-flight requests finish, then exit 0",
        )
        self.drain_task = asyncio.get_running_loop().create_task(self._watchdog())

    async def _watchdog(self) -> None:
        sim = self.sim
        interval = _check_interval_s()
        while sim.in_flight > 0 and not sim.unhealthy and not _forced():
            log("info", "draining", in_flight=sim.in_flight)
            await asyncio.sleep(interval)
        if sim.unhealthy or _forced():
            why = "while the last health check failed" if sim.unhealthy else f"with {FORCE_ENV} set"
            log("error", "forced_exit", reason=f"SIGTERM {why}")
            self.stop(1)
        else:
            log("warning", "drained", what="no request in flight; exiting 0")
            self.stop(0)

    def _interrupt(self) -> None:
        sim = self.sim
        log("info", "interrupted", in_flight=sim.in_flight, what="SIGINT: the requests end now")
        if sim.engine is not None:
            sim.engine.stop_all()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler: the work goes to the loop (thread-safe wake-up).
        if sig == signal.SIGTERM and self.loop is not None:
            self.loop.call_soon_threadsafe(self.drain)
            return
        if sig == signal.SIGINT and self.loop is not None:
            self.loop.call_soon_threadsafe(self._interrupt)
        super().handle_exit(sig, frame)


def serve(cfg: SimConfig) -> int:
    """Run the server in the foreground until SIGINT, or SIGTERM then the drain; the exit code."""
    disable_created_metrics()  # type: ignore[no-untyped-call]  # SGLang's multiprocess exposition has no *_created series
    app = create_app(cfg)
    config = uvicorn.Config(
        RawSend(app),
        host=cfg.host,
        port=cfg.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_keep_alive=30,
        backlog=4096,
        timeout_graceful_shutdown=3,  # hung requests (faults) must not block the exit
        http=stamped_protocol(),
    )
    server = DrainingServer(config, app.state.sim)
    where = {"host": cfg.host, "port": cfg.port, "next": "pick a free --port or check --host"}
    busy = cannot_listen(cfg.host, cfg.port)
    if busy:
        log("error", "cannot_listen", error=busy, **where)
        return 1
    url = f"http://{cfg.host}:{cfg.port}"
    log("info", "listening", url=url, next=f"curl {url}/health")
    try:
        # The loop polls through clock.StampingSelector: arrivals are stamped at the poll.
        with asyncio.Runner(loop_factory=new_loop) as runner:
            runner.run(server.serve())
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it handled after a clean shutdown
        log("info", "stopped", reason="SIGINT")
        return 0
    except OSError as exc:
        log("error", "cannot_listen", error=str(exc), **where)
        return 1
    except SystemExit:  # uvicorn exits (code 3) when the bind fails after all; it logged why
        server.started = False
    if not server.started:
        log("error", "cannot_listen", **where)
        return 1
    log("info", "stopped", exit_code=server.exit_code)
    return server.exit_code
