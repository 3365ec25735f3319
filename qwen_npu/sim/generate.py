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

Stream = proto.NativeStream | proto.OpenAIStream


async def _events(req: EngineRequest, stream: Stream) -> AsyncIterator[Event]:
    while True:
        for ch in await req.next_chunks():  # one SSE event per engine step, as SGLang streams them
            if ch.finished:
                yield stream.event(ch) + stream.tail() + b"data: [DONE]\n\n", ch.deadline, True
                return
            yield stream.event(ch), ch.deadline, False


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
        stream: Callable[[EngineRequest], Stream],
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
        released = False

        def release() -> None:  # the request's life in the server ends once
            nonlocal released
            if not released:
                released = True
                sim.in_flight -= 1
                eng.abort(req)

        if p.stream:
            return EventStream(_events(req, stream(req)), release, eng)
        try:
            while not (await req.next_chunks())[-1].finished:
                pass
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
        return await self._run(
            arrived,
            p,
            lambda req: proto.NativeStream(req, rid, steps),
            lambda req: proto.native_body(req, rid, self.sim.eng.loop.time(), steps),
        )

    async def _openai(self, raw: bytes, arrived: float | None, chat: bool) -> Response:
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        model = self.cfg.model_name
        try:
            p = proto.parse_openai(proto.loads(raw), self.cfg, rid, chat)
        except proto.BadRequest as exc:
            return bad_request(str(exc))
        return await self._run(
            arrived,
            p,
            lambda req: proto.OpenAIStream(req, rid, model, chat, p.include_usage),
            lambda req: proto.openai_body(req, rid, model, chat),
        )

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
