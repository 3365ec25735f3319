"""POST /generate, /v1/completions and /v1/chat/completions: ``GenerateHandlers``, bound to one Sim.

fastpath.RawSend calls them directly; ``add_routes`` gives FastAPI twins calling the same ones, so
the routes stay in the OpenAPI schema and work when the FastAPI app is mounted alone.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from qwen_npu.sim import protocol as proto
from qwen_npu.sim.fastpath import FastHandler, arrival
from qwen_npu.sim.routes import bad_request
from qwen_npu.sim.scheduler import Aborted, QueueFull
from qwen_npu.sim.scheduler import Request as EngineRequest
from qwen_npu.sim.state import Sim
from qwen_npu.sim.stream import Event, EventStream


class _Release:
    """Ends one request's life in the server once: leaves the in-flight count, aborts if running."""

    __slots__ = ("open", "req", "sim")

    def __init__(self, sim: Sim, req: EngineRequest) -> None:
        self.sim = sim
        self.req = req
        self.open = True

    def __call__(self) -> None:
        if self.open:
            self.open = False
            self.sim.in_flight -= 1
            self.sim.eng.abort(self.req)


class GenerateHandlers:
    """The generate routes' handlers for one simulator."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.cfg = sim.cfg

    def fast_routes(self) -> dict[tuple[str, str], FastHandler]:
        return {
            ("POST", "/generate"): self.generate,
            ("POST", "/v1/completions"): self.completions,
            ("POST", "/v1/chat/completions"): self.chat,
        }

    async def _run(
        self,
        arrived: float | None,
        p: proto.GenParams,
        events: Callable[[EngineRequest], AsyncIterator[Event]],
        whole: Callable[[EngineRequest], dict[str, Any]],
    ) -> Response:
        sim = self.sim
        sim.count_arrival()
        refused = sim.gate()
        if refused is not None:
            return refused
        eng = sim.eng
        req = sim.new_request(p)
        try:
            eng.submit(req, arrived)
        except QueueFull:
            return JSONResponse(
                proto.error_body("the waiting queue is full", 503, "busy"), status_code=503
            )
        sim.in_flight += 1
        release = _Release(sim, req)
        if p.stream:
            return EventStream(events(req), release, eng)
        try:
            while True:
                chunks = await req.next_chunks()
                if chunks[-1].finished:
                    break
        except Aborted:
            return JSONResponse(proto.error_body("aborted", 500, "aborted"), status_code=500)
        finally:  # also on cancellation (client gone): the slot is freed at once
            release()
        return JSONResponse(whole(req))

    async def generate(self, raw: bytes, arrived: float | None) -> Response:
        rid = uuid.uuid4().hex
        try:
            p = proto.parse_generate(proto.loads(raw), self.cfg, rid)
        except proto.BadRequest as exc:
            return bad_request(str(exc))
        steps = self.cfg.speculative_num_steps
        sim = self.sim

        async def events(req: EngineRequest) -> AsyncIterator[Event]:
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

        return await self._run(arrived, p, events, whole)

    async def _openai(self, raw: bytes, arrived: float | None, chat: bool) -> Response:
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        cfg = self.cfg
        try:
            p = proto.parse_openai(proto.loads(raw), cfg, rid, chat)
        except proto.BadRequest as exc:
            return bad_request(str(exc))

        async def events(req: EngineRequest) -> AsyncIterator[Event]:
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

        return await self._run(arrived, p, events, whole)

    async def completions(self, raw: bytes, arrived: float | None) -> Response:
        return await self._openai(raw, arrived, chat=False)

    async def chat(self, raw: bytes, arrived: float | None) -> Response:
        return await self._openai(raw, arrived, chat=True)


def _twin(handler: FastHandler) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        return await handler(await request.body(), arrival(request.scope))

    return route


def add_routes(app: FastAPI, handlers: GenerateHandlers) -> None:
    """The fast routes on ``app.state.fast_routes`` and their FastAPI twins."""
    app.state.fast_routes = handlers.fast_routes()
    for (method, path), handler in app.state.fast_routes.items():
        app.add_api_route(path, _twin(handler), methods=[method])
