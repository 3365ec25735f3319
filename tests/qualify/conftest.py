"""Fixtures of the qualify tests: simulators on free ports, and tiny fixture servers.

Simulators start as the other parts' tests start them (``qwen_npu.sim.testing.running_sim``: a
subprocess on a free port, waited for until it listens). The fixture servers are standard-library
HTTP servers on 127.0.0.1:0 answering ``/health`` and a non-streamed ``/generate`` from a function
of the prompt: a table (GSM8K answers), a sane opening then a loop, or text unlike any simulator's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from qwen_npu.sim.testing import running_sim

FAST = {"ttft_ms": 2, "itl_ms": 0.2, "health_check_poll_s": 0.02}
Answerer = Callable[[str, int], str]


@pytest.fixture(scope="package")
def healthy_pair() -> Iterator[tuple[str, str]]:
    """Two healthy simulators with the same profile."""
    with running_sim(**FAST) as a, running_sim(**FAST) as b:
        yield a, b


@pytest.fixture(scope="package")
def garbled_sim() -> Iterator[str]:
    """A simulator with the ``garbled`` fault: a sane start, then a short loop."""
    with running_sim(garbled=True, **FAST) as url:
        yield url


def _handler(answer: Answerer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path in ("/health", "/v1/models"):
                self._send(200, {"data": [{"id": "fixture"}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            params = body.get("sampling_params") or {}
            text = answer(str(body.get("text", "")), int(params.get("max_new_tokens", 16)))
            self._send(200, {"text": text, "meta_info": {"completion_tokens": len(text.split())}})

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def fixture_server() -> Iterator[Callable[[Answerer], str]]:
    """``start(answer) -> base URL``: a server whose /generate answers ``answer(prompt, n)``."""
    servers: list[ThreadingHTTPServer] = []

    def start(answer: Answerer) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(answer))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def qualify(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``qwen-npu qualify ARGS`` in a child process (the bench's locust patches a process's
    sockets; the kernels claim sets Triton's interpreter before triton loads)."""
    return subprocess.run(
        [sys.executable, "-m", "qwen_npu", "qualify", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def report(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / "report.json").read_text())
    return doc


def claim(doc: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in doc["claims"] if c["name"] == name]
    return found
