"""`helm test`: the test pod's script, rendered by the chart, run here against the simulator.

The chart renders the pod with in-cluster URLs; the test runs the same command with API_URL and
SIDECAR_URL pointed at a simulator (the engine) and a sidecar on 127.0.0.1. It passes when the
sidecar is ready and a short generation returns text, and fails in one line (no traceback)
when the sidecar does not answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from qwen_npu.sim.testing import running_sim
from tools import chart as chart_tool
from tools.perf.sidecar import sidecar_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    state = tmp_path_factory.mktemp("state")
    with (
        running_sim(ttft_ms=5, itl_ms=1) as engine,
        sidecar_process(engine, {"QWEN_NPU_STATE_DIR": str(state)}) as (sidecar, _),
    ):
        yield engine, sidecar


def _test_pod(values: dict[str, Any]) -> dict[str, Any]:
    (pod,) = chart_tool.find(chart_tool.render_docs(values), "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


def _run(container: dict[str, Any], **urls: str) -> subprocess.CompletedProcess[str]:
    env = {e["name"]: e["value"] for e in container["env"]}
    assert container["command"][:2] == ["python3", "-c"]
    return subprocess.run(
        [sys.executable, *container["command"][1:]],
        env={**os.environ, **env, **urls},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_helm_test_pod_checks_readiness_and_generates(stack: tuple[str, str]) -> None:
    engine, sidecar = stack
    container = _test_pod({"helmTest": {"maxNewTokens": 5}})
    proc = _run(container, API_URL=engine, SIDECAR_URL=sidecar)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sidecar /readyz status=200" in proc.stdout
    assert "generate status=ok completion_tokens=5 " in proc.stdout


class _Recorder(BaseHTTPRequestHandler):
    """A stand-in engine: answers POST /generate with a fixed text, keeps the request headers."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).seen.append(dict(self.headers))
        body = json.dumps({"text": " Paris", "meta_info": {"completion_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def recording_engine() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_the_helm_test_pod_sends_the_api_key_from_the_mounted_secret(
    stack: tuple[str, str], recording_engine: str, tmp_path: Path
) -> None:
    _, sidecar = stack
    container = _test_pod(chart_tool.values_from(chart_tool.CI_DIR / "apikey-values.yaml"))
    rendered = {e["name"]: e["value"] for e in container["env"]}
    assert rendered["QWEN_NPU_ENGINE_API_KEY_FILE"] == "/etc/qwen-npu/api-key/api-key"
    key_file = tmp_path / "api-key"
    key_file.write_text("sk-test\n")
    _Recorder.seen.clear()
    ok = _run(
        container,
        API_URL=recording_engine,
        SIDECAR_URL=sidecar,
        QWEN_NPU_ENGINE_API_KEY_FILE=str(key_file),
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (headers,) = _Recorder.seen
    assert headers.get("Authorization") == "Bearer sk-test"
    # A key file that cannot be read fails the test pod in one line.
    missing = _run(
        container,
        API_URL=recording_engine,
        SIDECAR_URL=sidecar,
        QWEN_NPU_ENGINE_API_KEY_FILE=str(tmp_path / "absent"),
    )
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert "helm test: generate failed:" in missing.stdout


def test_a_sidecar_that_does_not_answer_fails_in_one_line(stack: tuple[str, str]) -> None:
    engine, _ = stack
    proc = _run(_test_pod({}), API_URL=engine, SIDECAR_URL="http://127.0.0.1:9")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stdout.startswith("helm test: sidecar /readyz failed:"), proc.stdout
    assert "next: make status" in proc.stdout
