"""A truth server for measuring the load test itself: fixed timings, and its own log of them.

Why not the simulator: a bench's accuracy must be judged against something the bench's authors did
not also tune for it. This server shares no code with the simulator (standard-library asyncio, its
own HTTP/1.1 handling), speaks just enough of SGLang's protocol for both ``qwen-npu bench`` and
``sglang.benchmark.serving`` (``/generate`` streamed as SGLang streams it, ``/v1/models``,
``/model_info``, ``/server_info``, ``/flush_cache``, an empty ``/metrics``) and emits on absolute
deadlines counted from the moment it read the request line: the first token at ``ttft-ms``, then
one token every ``itl-ms``. Lateness never accumulates.

It logs, per generate request, when it read the request line (``recv``), when it wrote the first
and the last token (``first``, ``last``; seconds on its monotonic clock), the tokens asked and the
prompt length. ``GET /truth/log`` returns that log as JSON (``?clear=1`` empties it), so a
harness can set a client's figures against the server's own receive-to-first-emit times.

Run: ``python -m qwen_npu.loadtest.truth_server --port 30000 [--ttft-ms 50] [--itl-ms 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Entry:
    """One generate request as the server saw it (seconds on the server's monotonic clock)."""

    recv: float
    first: float
    last: float
    tokens: int
    prompt_len: int
    max_late_ms: float


class TruthServer:
    """The HTTP handling and the timed emission."""

    def __init__(self, ttft_ms: float, itl_ms: float) -> None:
        self.ttft_s = ttft_ms / 1000.0
        self.itl_s = itl_ms / 1000.0
        self.log: list[Entry] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                line = await reader.readline()
                recv = loop.time()
                if not line:
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(length) if length else b""
                if method == "POST" and path.split("?")[0] == "/generate":
                    await self.generate(writer, body, recv)
                else:
                    status, payload = self.route(method, path)
                    self.send_json(writer, status, payload)
                    await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def route(self, method: str, path: str) -> tuple[int, Any]:
        base = path.split("?")[0]
        if base == "/truth/log":
            entries = [asdict(e) for e in self.log]
            if "clear=1" in path:
                self.log = []
            return 200, entries
        if base in ("/health", "/health_generate", "/ready"):
            return 200, {}
        if base == "/v1/models":
            return 200, {"object": "list", "data": [{"id": "truth", "object": "model"}]}
        if base in ("/model_info", "/get_model_info"):
            return 200, {"model_path": "truth", "tokenizer_path": None, "is_generation": True}
        if base in ("/server_info", "/get_server_info"):
            return 200, {"truth_server": True, "internal_states": [{}]}
        if base == "/flush_cache" and method == "POST":
            return 200, {}
        if base == "/metrics":
            return 200, ""
        return 404, {"error": f"no route {method} {base}"}

    @staticmethod
    def send_json(writer: asyncio.StreamWriter, status: int, payload: Any) -> None:
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        ctype = "text/plain" if isinstance(payload, str) else "application/json"
        reason = "OK" if status == 200 else "Not Found"
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        writer.write(head.encode() + data)

    async def generate(self, writer: asyncio.StreamWriter, body: bytes, recv: float) -> None:
        req = json.loads(body or b"{}")
        ids = req.get("input_ids") or []
        max_new = int((req.get("sampling_params") or {}).get("max_new_tokens") or 16)
        loop = asyncio.get_running_loop()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        text = ""
        first = last = 0.0
        max_late = 0.0
        for k in range(max_new):
            due = recv + self.ttft_s + k * self.itl_s
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            text += f" t{k}"
            fin = f'{{"type":"length","length":{max_new}}}' if k == max_new - 1 else "null"
            event = (
                f'data: {{"text":"{text}","meta_info":{{"id":"truth","finish_reason":{fin},'
                f'"prompt_tokens":{len(ids)},"completion_tokens":{k + 1},'
                f'"cached_tokens":0}}}}\n\n'
            ).encode()
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            last = loop.time()
            if k == 0:
                first = last
            max_late = max(max_late, last - due)
            await writer.drain()
        done = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        await writer.drain()
        self.log.append(Entry(recv, first, last, max_new, len(ids), max_late * 1000.0))


def summarize(entries: list[dict[str, Any]], drop_first: int = 1) -> dict[str, float]:
    """The server's own figures over a run's requests, the first ``drop_first`` (warm-ups) off.

    Means in ms: TTFT (receive to first emit), TPOT (first to last emit over tokens - 1), E2E
    (receive to last emit), and the worst emit lateness against the deadlines.
    """
    rows = sorted(entries, key=lambda e: e["recv"])[drop_first:]
    if not rows:
        return {"n": 0}
    n = len(rows)
    return {
        "n": n,
        "mean_ttft_ms": sum(e["first"] - e["recv"] for e in rows) / n * 1000.0,
        "mean_tpot_ms": sum((e["last"] - e["first"]) / max(e["tokens"] - 1, 1) for e in rows)
        / n
        * 1000.0,
        "mean_e2e_latency_ms": sum(e["last"] - e["recv"] for e in rows) / n * 1000.0,
        "max_late_ms": max(e["max_late_ms"] for e in rows),
        "span_s": rows[-1]["last"] - rows[0]["recv"],
    }


async def serve(host: str, port: int, ttft_ms: float, itl_ms: float) -> None:
    server = TruthServer(ttft_ms, itl_ms)
    srv = await asyncio.start_server(server.handle, host, port, backlog=1024)
    print(
        f"truth-server listening on http://{host}:{port} ttft_ms={ttft_ms} itl_ms={itl_ms} "
        f"started={time.time():.0f}",
        flush=True,
    )
    async with srv:
        await srv.serve_forever()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m qwen_npu.loadtest.truth_server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    args = p.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.ttft_ms, args.itl_ms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
