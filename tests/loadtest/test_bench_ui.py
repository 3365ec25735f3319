"""`make bench-ui`: locust's own web UI on the bench's locustfile drives the target (issue 6).

Starts the make target on a free port against a fresh simulator, starts a swarm through the UI's
HTTP API (what the Start button sends) and reads the UI's request statistics; the whole process
group is stopped at the end.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from qwen_npu import processes
from qwen_npu.sim.testing import free_port, running_sim

from .benchrun import REPO

pytestmark = pytest.mark.slow


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def test_bench_ui_serves_locusts_ui_and_streams_generate_requests(tmp_path: Path) -> None:
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    with running_sim(ttft_ms=5, itl_ms=1) as target:
        make = [
            "make", "--no-print-directory", "bench-ui", f"UI_PORT={port}", f"TARGET={target}",
            "CONC=2", "INPUT_LEN=16", "OUTPUT_LEN=5",
        ]  # fmt: skip
        log = tmp_path / "make.log"
        with processes.running(
            make, log=log, cwd=REPO, new_session=True, what="make bench-ui",
            ready=lambda: processes.http_status(ui + "/") == 200,
        ) as proc:  # fmt: skip
            form = urllib.parse.urlencode({"user_count": 2, "spawn_rate": 2, "host": target})
            with urllib.request.urlopen(ui + "/swarm", data=form.encode(), timeout=5) as r:
                assert json.loads(r.read())["success"] is True

            def generate_stats() -> list[dict[str, Any]]:
                stats = _get(ui + "/stats/requests")["stats"]
                return [s for s in stats if s["name"] == "/generate"]

            processes.wait_until(
                lambda: (g := generate_stats()) and min(s["num_requests"] for s in g) >= 5,
                what="five /generate requests through the UI", proc=proc, log=log,
            )  # fmt: skip
            generate = generate_stats()
            assert all(s["num_failures"] == 0 for s in generate), generate
