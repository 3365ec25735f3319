"""POST /generate, /v1/completions and /v1/chat/completions: ``GenerateHandlers``, bound to one Sim.

fastpath.RawSend calls them directly; ``add_routes`` gives FastAPI twins calling the same ones, so
the routes stay in the OpenAPI schema and work when the FastAPI app is mounted alone. A stream is
an ``EventStream``, a small ASGI response rather than Starlette's StreamingResponse: no task group
per chunk, the headers leave with the first token, the last event with the end of the body in one
write, and the request is aborted when the client leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from qwen_npu.sim import protocol as proto
from qwen_npu.sim.fastpath import RAW_SEND_KEY, FastHandler, arrival
from qwen_npu.sim.routes import bad_request
from qwen_npu.sim.scheduler import Aborted, Engine, QueueFull
from qwen_npu.sim.scheduler import Request as EngineRequest
from qwen_npu.sim.state import Sim

#: What a stream's events iterator yields: (event bytes, engine deadline or 0, last event?).
Event = tuple[bytes, float, bool]

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


class EventStream(Response):
    """An SSE response fed by an async iterator of ``Event``.

    After each send it tells the engine how late the event left (``Engine.observe_send``).
    ``on_close`` runs when the stream ends for any reason (finished, aborted, client gone); it
    may run twice and must be idempotent.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncIterator[Event],
        on_close: Callable[[], None],
        eng: Engine,
    ) -> None:
        super().__init__(status_code=200, media_type=self.media_type)
        self.events = events
        self.on_close = on_close
        self.eng = eng

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The server's own send (see fastpath.RawSend): Starlette's two error-middleware wrappers
        # cost a visible share of the core at 20k+ events/s, and a stream has nothing for them.
        send = scope.get(RAW_SEND_KEY, send)
        watcher = asyncio.ensure_future(self._watch(receive))
        clock, observe = self.eng.loop.time, self.eng.observe_send
        started = ended = False
        try:
            async for event, deadline, last in self.events:
                if not started:
                    # The headers leave with the first token, not on arrival: under a burst of
                    # arrivals that keeps a write per request out of the arrivals' way.
                    started = True
                    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
                await send({"type": "http.response.body", "body": event, "more_body": not last})
                ended = last
                if deadline:
                    observe(clock() - deadline)
        except (Aborted, OSError):  # ended: client gone, or the server stopping on Ctrl-C
            pass
        finally:
            watcher.cancel()
            self.on_close()
            if not ended:  # end the response properly: a client still there sees it closed, not cut
                with contextlib.suppress(OSError, RuntimeError):
                    if not started:
                        await send(
                            {"type": "http.response.start", "status": 200, "headers": _HEADERS}
                        )
                    await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.on_close()
                return


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
            return proto.error("the waiting queue is full", 503, "busy")
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
            return proto.error("aborted", 500, "aborted")
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
