"""``EventStream``: the SSE response that sends one event per engine step.

A small ASGI response rather than Starlette's StreamingResponse: no background task group per
chunk, the headers leave with the first token, the last event leaves with the end of the body in
one write, and the request is aborted when the client leaves (a watcher on ``receive``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

from qwen_npu.sim.fastpath import RAW_SEND_KEY
from qwen_npu.sim.scheduler import Aborted, Engine

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
                    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
                await send({"type": "http.response.body", "body": event, "more_body": not last})
                if deadline:
                    observe(clock() - deadline)
                if last:
                    break
            if not last:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except Aborted:
            # the request was ended (client gone, or the server stopping on Ctrl-C): end the
            # response properly, so a client still there sees a closed stream, not a cut one
            if started:
                with contextlib.suppress(OSError, RuntimeError):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass
        finally:
            watcher.cancel()
            self.on_close()
            if not started:  # aborted before the first token: close the response properly
                with contextlib.suppress(OSError, RuntimeError):
                    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.on_close()
                return
