"""``make demo``'s program: it runs end to end, says where things are, and stops what it started."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from qwen_npu import processes

from .benchrun import REPO

pytestmark = pytest.mark.slow


def demo_cmd(out: Path, prompts: int) -> list[str]:
    return [sys.executable, "-m", "qwen_npu.loadtest.demo", "--num-prompts", str(prompts),
            "--out-dir", str(out), "--engine-port", "0", "--sidecar-port", "0"]  # fmt: skip


def _arrived(engine: str) -> int:
    try:
        with urllib.request.urlopen(engine + "/sim/stats", timeout=2) as r:
            return int(json.loads(r.read()).get("requests_arrived", 0))
    except (urllib.error.URLError, OSError):
        return 0


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


def test_demo_runs_the_bench_and_stops_the_servers(tmp_path: Path) -> None:
    proc = subprocess.run(demo_cmd(tmp_path, 10), cwd=REPO, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for step in ("1/4", "2/4", "3/4", "4/4"):
        assert f"demo: {step}" in out
    assert "Concurrency 10" in out and "Accept Length" in out
    engine = re.search(r"engine \(simulated\) metrics: (\S+)/metrics", out)
    sidecar = re.search(r"sidecar metrics: +(\S+)/metrics", out)
    assert engine and sidecar, out
    assert "qwen_npu_engine_up 1.0" in out
    assert "stopped simulator" in out and "stopped sidecar" in out
    assert not answers(engine.group(1) + "/v1/models")
    assert not answers(sidecar.group(1) + "/livez")
    assert (tmp_path / "bench.jsonl").read_text().count("\n") == 1


def test_ctrl_c_stops_what_the_demo_started(tmp_path: Path) -> None:
    log = tmp_path / "demo.out"
    proc = processes.start(demo_cmd(tmp_path, 200), log=log, cwd=REPO)
    try:
        engine_line = re.compile(r"on (http://127\.0\.0\.1:\d+); it is NOT a model")
        found = processes.wait_until(
            lambda: "demo: 3/4" in log.read_text() and engine_line.search(log.read_text()),
            what="the demo's bench step", proc=proc, log=log,
        )  # fmt: skip
        # Interrupt once the bench's requests reach the simulator (an event, not a pause).
        processes.wait_until(
            lambda: _arrived(found.group(1)) > 0, what="bench requests at the simulator",
            proc=proc, log=log,
        )  # fmt: skip
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        processes.stop(proc)
    seen = log.read_text()
    assert proc.returncode == 130, seen[-3000:]
    assert "stopped simulator" in seen and "stopped sidecar" in seen
    engine = re.search(r"on (http://127\.0\.0\.1:\d+); it is NOT a model", seen)
    assert engine, seen
    assert not answers(engine.group(1) + "/v1/models")
