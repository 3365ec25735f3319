"""Bounded HTTP exchanges with the engine, and the count of the ones that failed.

An engine that hangs, drips, answers huge or garbled, or is gone must end as one
``EngineError(kind)`` within its deadline: never an exception that kills a poller loop, never
unbounded memory. ``EngineErrors`` counts them (``qwen_npu_engine_errors_total{kind}``).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from qwen_npu.log import PartLog, RateLimiter
from qwen_npu.metrics.catalogue import ERROR_KINDS

log = PartLog("sidecar")

#: The health probe's path: the only place a refused connection is counted.
HEALTH_PATH = "/health_generate"


class EngineError(Exception):
    """One failed exchange; ``kind`` is one of ``ERROR_KINDS``."""

    def __init__(self, kind: str, detail: str, status: int | None = None) -> None:
        assert kind in ERROR_KINDS, kind
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.status = status


@dataclass(frozen=True)
class EngineResponse:
    status: int
    body: bytes
    seconds: float

    def json_object(self) -> dict[str, Any]:
        """A 200 answer's body as a JSON object; EngineError (status, malformed) otherwise."""
        if self.status != 200:
            raise EngineError("status", f"HTTP {self.status}", self.status)
        try:
            data = json.loads(self.body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise EngineError("malformed", f"body is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise EngineError("malformed", f"body is a JSON {type(data).__name__}, not an object")
        return data


class EngineClient:
    """An httpx client bound to the engine's base URL, with bounded reads."""

    def __init__(
        self,
        base_url: str,
        *,
        max_bytes: int,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.max_bytes = max_bytes
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            transport=transport,
            limits=httpx.Limits(max_connections=8, max_keepalive_connections=4),
            follow_redirects=False,
            trust_env=False,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def request(
        self, method: str, path: str, *, timeout: float, json_body: Any = None
    ) -> EngineResponse:
        """One exchange of at most ``timeout`` seconds and ``max_bytes`` of body, any HTTP status;
        transport failures, deadlines and oversize bodies raise EngineError."""
        start = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                return await self._exchange(method, path, timeout, json_body, start)
        except (TimeoutError, httpx.TimeoutException):
            raise EngineError(
                "timeout", f"{method} {path}: no full answer in {timeout:g}s"
            ) from None
        except httpx.HTTPError as exc:
            # Refused, reset, DNS, protocol garbage: the engine is not answering HTTP.
            kind = "malformed" if isinstance(exc, httpx.RemoteProtocolError) else "connect"
            raise EngineError(kind, f"{method} {path}: {type(exc).__name__}: {exc}") from None

    async def _exchange(
        self, method: str, path: str, timeout: float, json_body: Any, start: float
    ) -> EngineResponse:
        request = self._client.build_request(method, path, json=json_body, timeout=timeout)
        response = await self._client.send(request, stream=True)
        try:
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
                raise EngineError(
                    "too_large", f"{method} {path}: {declared} bytes > limit {self.max_bytes}"
                )
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():  # decoded: gzip bombs count too
                size += len(chunk)
                if size > self.max_bytes:
                    raise EngineError(
                        "too_large", f"{method} {path}: more than {self.max_bytes} bytes"
                    )
                chunks.append(chunk)
        finally:
            await response.aclose()
        return EngineResponse(response.status_code, b"".join(chunks), time.monotonic() - start)


class EngineErrors:
    """Failed exchanges by kind, each kind logged once a minute. Reachability is the health
    probe's to count (once per lost engine start): a ``connect`` error elsewhere is not counted."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(ERROR_KINDS, 0)
        self.limiter = RateLimiter(60.0)

    def count(self, exc: EngineError, where: str) -> None:
        if exc.kind == "connect" and where != HEALTH_PATH:
            return
        self.counts[exc.kind] += 1
        if self.limiter.allow(f"{exc.kind}-{where}"):
            log(
                "warning",
                "engine_error",
                kind=exc.kind,
                where=where,
                detail=exc.detail,
                next="counted in qwen_npu_engine_errors_total; logged once a minute",
            )
