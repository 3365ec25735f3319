"""``serve(cfg)``: run the simulator under uvicorn until SIGINT, or SIGTERM and a drain.

uvicorn's own signal handling stops at once on SIGTERM and then re-raises the signal (the process
dies of it). ``DrainingServer`` turns SIGTERM into SGLang's drain instead (drain.Drain) and exits 0
when it is done, 1 when it was forced. SIGINT stops at once: uvicorn's graceful shutdown would wait
up to ``timeout_graceful_shutdown`` for the streams in flight and then cancel them (an ``Exception
in ASGI application`` traceback each), so the engine ends them first (``Engine.stop_all``): each
stream closes cleanly and the shutdown finds nothing to wait for.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from types import FrameType

import uvicorn

from qwen_npu.log import PartLog
from qwen_npu.ports import cannot_listen
from qwen_npu.sim.config import SimConfig
from qwen_npu.sim.drain import Drain

log = PartLog("sim")


class DrainingServer(uvicorn.Server):
    """uvicorn's server; SIGTERM starts a drain instead of stopping at once."""

    def __init__(self, config: uvicorn.Config, drain_of: Drain | None = None) -> None:
        super().__init__(config)
        self.drain = drain_of
        self.exit_code = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        #: Run on the loop at the first SIGINT: ends the requests in flight (serve() sets it).
        self.on_interrupt: Callable[[], None] | None = None

    async def serve(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)  # type: ignore[arg-type]

    def stop(self, code: int) -> None:
        """End the server: 0 after a drain (graceful), else at once."""
        self.exit_code = code
        self.should_exit = True
        if code:
            self.force_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and self.drain is not None and self.loop is not None:
            # A signal handler: hand the work to the loop (thread-safe wake-up).
            self.loop.call_soon_threadsafe(self.drain.begin)
            return
        if sig == signal.SIGINT and self.on_interrupt is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(self.on_interrupt)
        super().handle_exit(sig, frame)


def serve(cfg: SimConfig) -> int:
    """Run the server in the foreground until SIGINT, or SIGTERM then the drain; the exit code."""
    # lazy: an extra's (pyproject.toml); the base install goes without
    from prometheus_client import disable_created_metrics

    # lazy: the ASGI stack loads when the server starts
    from qwen_npu.sim.app import create_app, stamped_protocol
    from qwen_npu.sim.clock import new_loop
    from qwen_npu.sim.fastpath import RawSend

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
    server = DrainingServer(config)
    server.drain = Drain(app.state.sim, server.stop)
    sim = app.state.sim

    def stop_requests() -> None:
        log("info", "interrupted", in_flight=sim.in_flight, what="SIGINT: the requests end now")
        if sim.engine is not None:
            sim.engine.stop_all()

    server.on_interrupt = stop_requests
    busy = cannot_listen(cfg.host, cfg.port)
    if busy:
        log(
            "error",
            "cannot_listen",
            host=cfg.host,
            port=cfg.port,
            error=busy,
            next="pick a free --port or check --host",
        )
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
        log("error", "cannot_listen", error=str(exc), next="pick a free --port")
        return 1
    except SystemExit:  # uvicorn exits (code 3) when the bind fails after all; it logged why
        log("error", "cannot_listen", next="pick a free --port or check --host")
        return 1
    if not server.started:
        log("error", "cannot_listen", next="pick a free --port or check --host")
        return 1
    log("info", "stopped", exit_code=server.exit_code)
    return server.exit_code
