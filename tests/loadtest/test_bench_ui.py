"""`make bench-ui`: locust's own web UI on the bench's locustfile drives the target (issue 6).

Starts the make target on a free port against a fresh simulator, starts a swarm through the UI's
HTTP API (what the Start button sends) and reads the UI's request statistics; the whole process
group is stopped at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest

from qwen_npu.serve.sim.testing import free_port, running_sim

from .benchrun import REPO

pytestmark = pytest.mark.slow


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def test_bench_ui_serves_locusts_ui_and_streams_generate_requests() -> None:
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    with running_sim(ttft_ms=5, itl_ms=1) as target:
        make = [
            "make", "--no-print-directory", "bench-ui", f"UI_PORT={port}", f"TARGET={target}",
            "CONC=2", "INPUT_LEN=16", "OUTPUT_LEN=5",
        ]  # fmt: skip
        proc = subprocess.Popen(
            make,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, proc.communicate()[0].decode()[-2000:]
                try:
                    with urllib.request.urlopen(ui + "/", timeout=2) as r:
                        assert r.status == 200
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the locust web UI did not open"
                    time.sleep(0.3)
            form = urllib.parse.urlencode({"user_count": 2, "spawn_rate": 2, "host": target})
            with urllib.request.urlopen(ui + "/swarm", data=form.encode(), timeout=5) as r:
                assert json.loads(r.read())["success"] is True
            deadline = time.monotonic() + 30
            while True:
                stats = _get(ui + "/stats/requests")["stats"]
                generate = [s for s in stats if s["name"] == "/generate"]
                if generate and min(s["num_requests"] for s in generate) >= 5:
                    break
                assert time.monotonic() < deadline, stats
                time.sleep(0.3)
            assert all(s["num_failures"] == 0 for s in generate), generate
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
