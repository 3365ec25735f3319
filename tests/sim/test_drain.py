"""The simulator on SIGTERM drains as SGLang 0.5.23 does; SIGKILL breaks streams mid-way.

Every wait is for an event (the first token read, a probe answering 503, the process exiting),
never for a time window. The drain watchdog checks every 20 ms here (QWEN_NPU_DRAIN_CHECK_S).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from qwen_npu import processes

# Slow: every test starts and signals a simulator process; test-fast keeps the sim's config tests.
pytestmark = pytest.mark.slow

FAST_CHECK = {"QWEN_NPU_DRAIN_CHECK_S": "0.02"}


@dataclass
class StreamReader:
    """Reads one streaming /generate in a thread; records events, whether it ended cleanly."""

    url: str
    max_new: int
    events: list[Any] = field(default_factory=list)
    first: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def start(self) -> StreamReader:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        body = {
            "input_ids": [1, 2, 3],
            "sampling_params": {"max_new_tokens": self.max_new, "ignore_eos": True},
            "stream": True,
        }
        try:
            with (
                httpx.Client(timeout=60) as c,
                c.stream("POST", self.url + "/generate", json=body) as r,
            ):
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        data = line[6:]
                        self.events.append(data if data == "[DONE]" else json.loads(data))
                        self.first.set()
        except (httpx.HTTPError, OSError) as exc:
            self.error = exc
        finally:
            self.first.set()
            self.done.set()

    @property
    def complete(self) -> bool:
        return bool(self.events) and self.events[-1] == "[DONE]" and self.error is None


@contextmanager
def sim(
    tmp_path: Path, env: dict[str, str] | None = None, *flags: str
) -> Iterator[tuple[str, Any]]:
    port = processes.free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "qwen_npu", "sim", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--ttft-ms", "5", "--health-check-poll-s", "0.01", *flags]
    log = tmp_path / f"sim-{port}.log"
    with processes.running(
        cmd, log=log, env={**FAST_CHECK, **(env or {})}, ready_url=url + "/health"
    ) as proc:
        yield url, proc


def exit_code(proc: Any) -> int:
    processes.wait_until(lambda: proc.poll() is not None, what="the simulator to exit")
    return int(proc.returncode)


def test_sigterm_drains_in_flight_requests_then_exits_0(tmp_path: Path) -> None:
    with sim(tmp_path, None, "--itl-ms", "10") as (url, proc):
        reader = StreamReader(url, max_new=150).start()
        assert reader.first.wait(30) and reader.events, reader.error
        proc.send_signal(signal.SIGTERM)
        # Probes say 503 at once; the process is still there, serving the stream.
        processes.wait_until(
            lambda: processes.http_status(url + "/health") == 503, what="/health 503"
        )
        assert processes.http_status(url + "/health_generate") == 503
        assert processes.http_status(url + "/ready") == 503
        # A request that still arrives is served, as SGLang serves it while draining.
        late = httpx.post(
            url + "/generate",
            json={"input_ids": [5], "sampling_params": {"max_new_tokens": 2}},
            timeout=30,
        )
        assert late.status_code == 200, late.text
        assert proc.poll() is None or reader.done.is_set()
        assert exit_code(proc) == 0
        assert reader.done.wait(30)
        assert reader.complete, (reader.error, reader.events[-1:])
        assert len(reader.events) == 151  # 150 tokens and [DONE]: nothing cut short
        log = (tmp_path / f"sim-{url.rsplit(':', 1)[1]}.log").read_text()
        assert "event=draining" in log and "event=drained" in log


def test_sigterm_without_requests_exits_0_at_once(tmp_path: Path) -> None:
    with sim(tmp_path) as (_url, proc):
        proc.send_signal(signal.SIGTERM)
        assert exit_code(proc) == 0


@pytest.mark.parametrize("why", ["force", "unhealthy"])
def test_sigterm_exits_at_once_when_forced_or_unhealthy(tmp_path: Path, why: str) -> None:
    env = {"SGL_FORCE_SHUTDOWN": "1"} if why == "force" else {}
    with sim(tmp_path, env, "--itl-ms", "20", "--health-check-timeout-s", "0.2") as (url, proc):
        reader = StreamReader(url, max_new=100000).start()  # would stream for half an hour
        assert reader.first.wait(30) and reader.events, reader.error
        if why == "unhealthy":
            r = httpx.patch(url + "/sim/faults", json={"hang_generate": True}, timeout=10)
            assert r.status_code == 200, r.text
            # The next health check sees no engine output: the server is now unhealthy.
            assert processes.http_status(url + "/health", timeout=10) == 503
        proc.send_signal(signal.SIGTERM)
        assert exit_code(proc) == 1
        assert reader.done.wait(30)
        assert not reader.complete


def test_sigkill_breaks_the_stream(tmp_path: Path) -> None:
    with sim(tmp_path, None, "--itl-ms", "20") as (url, proc):
        reader = StreamReader(url, max_new=100000).start()
        assert reader.first.wait(30) and reader.events, reader.error
        proc.send_signal(signal.SIGKILL)
        assert exit_code(proc) == -signal.SIGKILL
        assert reader.done.wait(30)
        assert not reader.complete
        assert reader.error is not None  # the client sees a broken stream, not a clean end
