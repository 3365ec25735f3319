"""`make status` shows the router's view of its workers (GET /workers inside the router pod),
says so in one line when the release has no router, and fails when a worker is ejected."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make

from qwen_npu.processes import free_port

from .stand_ins import calls, errors, install

ROUTER_SELECTOR = "app.kubernetes.io/instance=qwen-npu,app.kubernetes.io/component=router"


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    return install(tmp_path / "bin")


@pytest.fixture()
def pod_endpoints() -> Iterator[tuple[int, dict[str, Any]]]:
    """A local server standing in for the sidecar's /status and the router's /workers."""
    answers: dict[str, Any] = {"/status": {"engine": {"ready": True}}, "/workers": {"workers": []}}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(answers.get(self.path, {})).encode()
            self.send_response(200 if self.path in answers else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield port, answers
    finally:
        server.shutdown()
        server.server_close()


def test_status_asks_the_router_pod_for_its_workers(repo: Path, env: dict[str, str]) -> None:
    done = make(repo, env, "status")
    assert done.returncode == 0, done.stdout + done.stderr
    seen = calls(env)
    lookup = [c for c in seen if ROUTER_SELECTOR in c]
    assert lookup and "jsonpath={.items[0].metadata.name}" in " ".join(lookup[0])
    router_exec = seen[-1]
    assert router_exec[3:5] == ["exec", "qwen-npu-engine-7d9f-abcde"]
    assert router_exec[5:8] == ["-c", "router", "--"]
    assert "http://127.0.0.1:30000/workers" in router_exec[-1]


def test_status_lists_each_worker_and_fails_on_an_ejected_one(
    repo: Path, env: dict[str, str], pod_endpoints: tuple[int, dict[str, Any]]
) -> None:
    port, answers = pod_endpoints
    answers["/workers"] = {
        "workers": [
            {"url": "http://10.0.0.1:30000", "is_healthy": True, "load": 3},
            {"url": "http://10.0.0.2:30000", "is_healthy": False, "load": 0},
        ]
    }
    local = {**env, "ONCALL_EXEC_LOCAL": "1"}
    args = ("status", f"SIDECAR_PORT={port}", f"ROUTER_PORT={port}")
    done = make(repo, local, *args)
    assert done.returncode != 0
    out = done.stdout
    assert "router worker http://10.0.0.1:30000 healthy=true load=3" in out
    assert "router worker http://10.0.0.2:30000 healthy=false load=0" in out
    assert "router workers: 2 healthy: 1" in out
    verdict = errors(done).strip().splitlines()[-1]
    assert verdict.startswith("status: the router ") and "qwennpurouterworkerejected" in verdict

    answers["/workers"]["workers"].pop()
    done = make(repo, local, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "router workers: 1 healthy: 1" in done.stdout
