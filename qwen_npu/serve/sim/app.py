"""The simulator's HTTP surface: SGLang 0.5.23's routes plus ``/sim/faults``.

FastAPI carries the routes; streaming responses use a small ASGI response that sends one SSE event
per engine step (no background task group per chunk) and aborts the request when the client leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from qwen_npu import __version__
from qwen_npu.serve.sim import protocol as proto
from qwen_npu.serve.sim.clock import ready_at
from qwen_npu.serve.sim.config import SimConfig
from qwen_npu.serve.sim.engine import Aborted, Engine, QueueFull
from qwen_npu.serve.sim.engine import Request as EngineRequest
from qwen_npu.serve.sim.faults import FaultError, Faults
from qwen_npu.serve.sim.metrics import MALFORMED_EXPOSITION, SimMetrics
from qwen_npu.serve.sim.tokens import stream_for

log = logging.getLogger("qwen_npu.sim")
SGLANG_PROTOCOL_VERSION = "0.5.23"
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class EventStream(Response):
    """An SSE response fed by an async iterator of (event bytes, engine deadline or 0, last).

    After each send it tells the engine how late the event left (``Engine.observe_send``). The
    last event goes out with the end of the body in one write (one syscall fewer per request).
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncIterator[tuple[bytes, float, bool]],
        on_close: Callable[[], None],
        eng: Engine,
    ) -> None:
        super().__init__(status_code=200, media_type=self.media_type)
        self.events = events
        self.on_close = on_close
        self.eng = eng

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
        ]
        # The server's own send (see RawSend): Starlette's two error-middleware wrappers cost a
        # visible share of the core at 20k+ events/s, and a stream has nothing for them to do.
        send = scope.get(RAW_SEND_KEY, send)
        watcher = asyncio.ensure_future(self._watch(receive))
        started = False
        try:
            clock = self.eng.loop.time
            observe = self.eng.observe_send
            last = False
            async for event, deadline, last in self.events:
                if not started:
                    # The headers leave with the first token, not on arrival: under a burst of
                    # arrivals that keeps a write per request out of the arrivals' way.
                    started = True
                    await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": event, "more_body": not last})
                if deadline:
                    observe(clock() - deadline)
                if last:
                    break
            if not last:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (Aborted, OSError):
            pass
        finally:
            watcher.cancel()
            self.on_close()
            if not started:  # aborted before the first token: close the response properly
                with contextlib.suppress(OSError, RuntimeError):
                    await send({"type": "http.response.start", "status": 200, "headers": headers})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.on_close()
                return


class Sim:
    """State shared by the routes: config, engine, faults, metrics and the start clock."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.metrics = SimMetrics(cfg.model_name)
        self.faults = Faults.from_config(cfg)
        self.engine: Engine | None = None
        self.ready_at = 0.0
        self.started_wall = time.time()
        self.counter = itertools.count()
        self.error_rng = random.Random(cfg.seed)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.engine = Engine(self.cfg, self.metrics)
        self.ready_at = loop.time() + self.cfg.startup_delay_s
        if self.faults.hang_generate:
            self.engine.pause()
        if self.cfg.startup_delay_s:
            loop.call_at(self.ready_at, self._log_ready)
        else:
            self._log_ready()
        if self.cfg.crash_after_s:
            loop.call_later(self.cfg.crash_after_s, crash, "crash-after-s elapsed")

    def _log_ready(self) -> None:
        log.info("event=ready what='the simulator answers /health and /generate now'")

    @property
    def eng(self) -> Engine:
        assert self.engine is not None, "the app's lifespan has not started"
        return self.engine

    def ready(self) -> bool:
        return self.engine is not None and self.eng.loop.time() >= self.ready_at

    def new_request(self, p: proto.GenParams, *, log_metrics: bool = True) -> EngineRequest:
        no = next(self.counter)
        garble = self.cfg.garble_after_tokens if self.faults.garbled else None
        tokens = stream_for(
            p.prompt_ids,
            greedy=p.greedy,
            seed=self.cfg.seed,
            request_no=no,
            vocab_size=self.cfg.vocab_size,
            garble_after=garble,
        )
        return EngineRequest(
            no=no,
            prompt_len=len(p.prompt_ids),
            max_new=p.max_new,
            tokens=tokens,
            streaming=p.stream,
            log_metrics=log_metrics,
        )

    def gate(self, openai: bool) -> JSONResponse | None:
        """The answer that refuses a generate request before it reaches the engine, if any."""
        if not self.ready():
            return JSONResponse(
                proto.error_body("the server is starting (simulated startup delay)", 503, "busy"),
                status_code=503,
            )
        rate = self.faults.error_rate
        if rate and self.error_rng.random() < rate:
            body = proto.error_body(
                "simulated engine error (fault error_rate)", 500, "InternalServerError"
            )
            return JSONResponse(body, status_code=500)
        return None


ARRIVAL_KEY = "qwen_npu_sim_arrival"
RAW_SEND_KEY = "qwen_npu_sim.raw_send"


FastHandler = Callable[[bytes, "float | None"], Awaitable[Response]]


class RawSend:
    """Outermost ASGI layer: the generate routes' fast path, and the raw ``send`` for streams.

    Under a burst of requests every microsecond of per-request work delays the next request's
    arrival stamp, so POST /generate and the OpenAI routes skip FastAPI's routing and middleware:
    the body is read here and handed to the same handler the FastAPI route uses. Streams send
    with the server's undecorated ``send`` (kept in the scope).
    """

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
                response = await handler(b"".join(chunks), _arrival(scope))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def stamped_protocol() -> type:
    """uvicorn's HTTP protocol (httptools when installed, else h11), stamping arrival times.

    Under a burst of requests the handler of the last one runs only after the others'; stamping
    each new request's scope with the time the loop's poll returned (``clock.ready_at``, the
    loop's own clock) lets TTFT count from when the bytes arrived, as on a real server.
    """
    base: Any
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base = HttpToolsProtocol
    except ImportError:  # httptools missing: the pure-Python parser
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


def crash(reason: str) -> None:
    log.error("event=crash reason=%r what='exiting 1 as asked (simulated crash)'", reason)
    logging.shutdown()
    os._exit(1)


def _arrival(scope: Scope) -> float | None:
    state = scope.get("state")
    return state.get(ARRIVAL_KEY) if isinstance(state, dict) else None


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        raise proto.BadRequest("the body is not valid JSON") from None


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        raise proto.BadRequest("the body is not valid JSON") from None


def _bad(msg: str) -> JSONResponse:
    return JSONResponse(proto.error_body(msg, 400, "BadRequestError"), status_code=400)


def create_app(cfg: SimConfig) -> FastAPI:
    """The ASGI app for one simulator config."""
    sim = Sim(cfg)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await sim.start()
        yield

    app = FastAPI(title="qwen-npu sim (SGLang-protocol simulator)", lifespan=lifespan)
    app.state.sim = sim

    # -- generation --------------------------------------------------------------------------

    async def run(
        arrival: float | None,
        p: proto.GenParams,
        events: Callable[[EngineRequest], AsyncIterator[tuple[bytes, float, bool]]],
        whole: Callable[[EngineRequest], dict[str, Any]],
    ) -> Response:
        eng = sim.eng
        req = sim.new_request(p)
        try:
            eng.submit(req, arrival)
        except QueueFull:
            return JSONResponse(
                proto.error_body("the waiting queue is full", 503, "busy"), status_code=503
            )
        if p.stream:
            return EventStream(events(req), lambda: eng.abort(req), eng)
        try:
            while True:
                chunks = await req.next_chunks()
                if chunks[-1].finished:
                    break
        except asyncio.CancelledError:
            eng.abort(req)
            raise
        except Aborted:
            return JSONResponse(proto.error_body("aborted", 500, "aborted"), status_code=500)
        return JSONResponse(whole(req))

    async def generate_raw(raw: bytes, arrival: float | None) -> Response:
        rid = uuid.uuid4().hex
        try:
            p = proto.parse_generate(_loads(raw), cfg, rid)
        except proto.BadRequest as exc:
            return _bad(str(exc))
        refused = sim.gate(openai=False)
        if refused is not None:
            return refused
        steps = cfg.speculative_num_steps

        async def events(req: EngineRequest) -> AsyncIterator[tuple[bytes, float, bool]]:
            ns = proto.NativeStream(req, rid, steps)
            while True:
                chunks = await req.next_chunks()
                for ch in chunks:  # one SSE event per engine step, as SGLang streams them
                    if ch.finished:
                        yield ns.event(ch) + b"data: [DONE]\n\n", ch.deadline, True
                        return
                    yield ns.event(ch), ch.deadline, False

        def whole(req: EngineRequest) -> dict[str, Any]:
            return proto.native_body(req, rid, sim.eng.loop.time(), steps)

        return await run(arrival, p, events, whole)

    async def openai_raw(raw: bytes, arrival: float | None, chat: bool) -> Response:
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        try:
            p = proto.parse_openai(_loads(raw), cfg, rid, chat)
        except proto.BadRequest as exc:
            return _bad(str(exc))
        refused = sim.gate(openai=True)
        if refused is not None:
            return refused

        async def events(req: EngineRequest) -> AsyncIterator[tuple[bytes, float, bool]]:
            os_ = proto.OpenAIStream(req, rid, cfg.model_name, chat)
            while True:
                chunks = await req.next_chunks()
                for ch in chunks:
                    if ch.finished:
                        usage = os_.usage_event() if p.include_usage else b""
                        yield os_.event(ch) + usage + b"data: [DONE]\n\n", ch.deadline, True
                        return
                    yield os_.event(ch), ch.deadline, False

        def whole(req: EngineRequest) -> dict[str, Any]:
            return proto.openai_body(req, rid, cfg.model_name, chat)

        return await run(arrival, p, events, whole)

    async def completions_raw(raw: bytes, arrival: float | None) -> Response:
        return await openai_raw(raw, arrival, chat=False)

    async def chat_raw(raw: bytes, arrival: float | None) -> Response:
        return await openai_raw(raw, arrival, chat=True)

    # The generate routes are served by RawSend's fast path; these FastAPI twins keep them in
    # the OpenAPI schema and serve any caller that mounts the FastAPI app alone.
    @app.post("/generate")
    async def generate(request: Request) -> Response:
        return await generate_raw(await request.body(), _arrival(request.scope))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await completions_raw(await request.body(), _arrival(request.scope))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await chat_raw(await request.body(), _arrival(request.scope))

    app.state.fast_routes = {
        ("POST", "/generate"): generate_raw,
        ("POST", "/v1/completions"): completions_raw,
        ("POST", "/v1/chat/completions"): chat_raw,
    }

    # -- probes ------------------------------------------------------------------------------

    @app.get("/health")
    @app.get("/health_generate")
    async def health() -> Response:
        while sim.faults.hang_health:
            await sim.faults.changed.wait()
        if not sim.ready():
            return Response(status_code=503)
        eng = sim.eng
        p = proto.GenParams([0], 1, True, False, "HEALTH_CHECK")
        req = sim.new_request(p, log_metrics=False)
        tic = eng.loop.time()
        eng.submit(req)
        try:
            end = tic + cfg.health_check_timeout_s
            while eng.loop.time() < end:
                await asyncio.sleep(min(cfg.health_check_poll_s, max(end - eng.loop.time(), 0)))
                if eng.last_emit > tic:
                    return Response(status_code=200)
            log.warning(
                "event=health_failed what='no engine output within health-check-timeout-s' "
                "next='check the hang_generate fault or the queue'"
            )
            return Response(status_code=503)
        finally:
            eng.abort(req)

    @app.get("/ready")
    async def ready() -> Response:
        return Response(status_code=200 if sim.ready() else 503)

    # -- information -------------------------------------------------------------------------

    @app.get("/model_info")
    @app.get("/get_model_info")
    async def model_info() -> dict[str, Any]:
        return {
            "model_path": cfg.model_path,
            "served_model_name": cfg.model_name,
            "tokenizer_path": cfg.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "qwen3_5_moe",
            "architectures": ["Qwen3_5MoeForConditionalGeneration"],
            "simulator": f"qwen-npu sim {__version__}",
        }

    @app.get("/server_info")
    @app.get("/get_server_info")
    async def server_info() -> dict[str, Any]:
        eng = sim.eng
        tput, acc_len, _ = eng.window_stats()
        state: dict[str, Any] = {
            "last_gen_throughput": tput,
            "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": cfg.max_total_tokens},
        }
        if eng.spec:
            state["avg_spec_accept_length"] = acc_len
        spec = cfg.speculative_algorithm if eng.spec else None
        return {
            "model_path": cfg.model_path,
            "served_model_name": cfg.model_name,
            "tp_size": cfg.tp_size,
            "device": "npu",
            "quantization": "modelslim",
            "max_running_requests": cfg.max_running_requests,
            "context_length": cfg.context_length,
            "enable_metrics": True,
            "speculative_algorithm": spec,
            "speculative_num_steps": cfg.speculative_num_steps if spec else None,
            "speculative_eagle_topk": cfg.speculative_eagle_topk if spec else None,
            "speculative_num_draft_tokens": cfg.speculative_num_draft_tokens if spec else None,
            "max_total_num_tokens": cfg.max_total_tokens,
            "startup_time": sim.started_wall,
            "internal_states": [state],
            "version": SGLANG_PROTOCOL_VERSION,
            "frontend": "python",
            "simulator": f"qwen-npu sim {__version__}",
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": cfg.model_name,
            "object": "model",
            "created": int(sim.started_wall),
            "owned_by": "sglang",
            "root": cfg.model_name,
            "max_model_len": cfg.context_length,
        }
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def metrics() -> Response:
        delay = sim.faults.metrics_delay_s
        if delay:
            await asyncio.sleep(delay)
        if sim.faults.metrics_malformed:
            body = MALFORMED_EXPOSITION
        else:
            body = sim.metrics.render(sim.eng.gauges())
        return Response(body, media_type=PROMETHEUS_CONTENT_TYPE)

    # -- the fault surface -------------------------------------------------------------------

    @app.get("/sim/faults")
    async def get_faults() -> dict[str, Any]:
        return sim.faults.as_dict()

    @app.patch("/sim/faults")
    async def patch_faults(request: Request) -> Response:
        try:
            changes = sim.faults.parse_patch(await _json_body(request))
        except (FaultError, proto.BadRequest) as exc:
            return _bad(str(exc))
        sim.faults.apply(changes)
        log.warning("event=faults_changed changes=%s now=%s", changes, sim.faults.as_dict())
        if "hang_generate" in changes:
            if changes["hang_generate"]:
                sim.eng.pause()
            else:
                sim.eng.resume()
        if changes.get("crash"):
            asyncio.get_running_loop().call_later(0.05, crash, "PATCH /sim/faults crash=true")
            return JSONResponse({**sim.faults.as_dict(), "crash": True}, status_code=202)
        return JSONResponse(sim.faults.as_dict())

    @app.get("/sim/stats")
    async def get_stats() -> dict[str, Any]:
        return sim.eng.timing_stats()

    @app.get("/sim/config")
    async def get_config() -> dict[str, Any]:
        return cfg.as_dict()

    return app
