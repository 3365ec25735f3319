"""The stuck-versus-draining rule against SGLang 0.5.23's own ``/health_generate`` handler.

The sidecar tells a draining (or starting) engine from a stuck one by how long SGLang took to
answer 503 (``health.STUCK_503_MIN_S``). Our simulator makes the same assumption, so testing the
rule against it proves nothing; this drives the real route of ``sglang.srt.entrypoints.http_server``
(from the wheel in .venv) in-process with FastAPI's TestClient. The handler's collaborators are
stand-ins: the tokenizer manager (``gracefully_exit``, ``server_status``, a ``generate_request``
that answers or never does) and the disaggregation config. Its clock is virtual: the module's
``time.time`` and ``asyncio.sleep`` are the test's, so SGLang's 20 s check takes no time and the
latency of each answer is exact, whatever the machine's load.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from qwen_npu.sidecar.config import Settings
from qwen_npu.sidecar.health import HARD_FAILURES, STUCK_503_MIN_S, HealthTracker, classify

pytestmark = pytest.mark.sglang

# SGLang's server module and its ServerStatus, imported when a test of this file first runs, not at
# collection: every pytest-xdist worker collects every file, and the import costs some 15 s of CPU.
http_server: Any = None
ServerStatus: Any = None


@pytest.fixture(scope="module", autouse=True)
def _sglang_server_module() -> None:
    global http_server, ServerStatus
    import sglang.srt.entrypoints.http_server as module
    from sglang.srt.managers.tokenizer_manager import ServerStatus as status

    http_server, ServerStatus = module, status


class VirtualClock:
    """``time.time`` and ``asyncio.sleep`` for the handler: a sleep moves the clock, then yields."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)  # let the handler's generate task run, as a real sleep would


class TokenizerManager:
    """What the handler reads of SGLang's TokenizerManager, nothing more."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.gracefully_exit = False
        self.server_status = ServerStatus.Up
        self.is_generation = True
        self.last_receive_tstamp = 0.0
        self.rid_to_state: dict[str, Any] = {}
        self.stuck = False  # the scheduler never answers the 1-token generate

    async def generate_request(self, obj: Any, request: Any) -> AsyncIterator[dict[str, Any]]:
        if self.stuck:
            await asyncio.Event().wait()  # cancelled by the handler when it gives up
        self.last_receive_tstamp = self.clock.now  # the detokenizer's answer arrived
        yield {}


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, TokenizerManager]]:
    clock = VirtualClock()
    manager = TokenizerManager(clock)
    monkeypatch.setattr(http_server, "_global_state", SimpleNamespace(tokenizer_manager=manager))
    monkeypatch.setattr(
        http_server, "get_disagg", lambda: SimpleNamespace(disaggregation_mode="null")
    )
    monkeypatch.setattr(
        http_server,
        "time",
        SimpleNamespace(time=clock.time, strftime=time.strftime, localtime=time.localtime),
    )
    monkeypatch.setattr(
        http_server, "asyncio", SimpleNamespace(sleep=clock.sleep, create_task=asyncio.create_task)
    )
    # Not entered as a context manager: SGLang's lifespan starts a real server's processes.
    yield TestClient(http_server.app), manager


def probe(client: TestClient, manager: TokenizerManager) -> tuple[int, float]:
    """One ``GET /health_generate``: SGLang's status and its latency on the handler's clock."""
    start = manager.clock.now
    response = client.get("/health_generate")
    return response.status_code, manager.clock.now - start


def test_a_healthy_engine_answers_200(engine: tuple[TestClient, TokenizerManager]) -> None:
    client, manager = engine
    status, _ = probe(client, manager)
    assert status == 200 and manager.server_status == ServerStatus.Up


def test_a_shutting_down_engine_answers_503_at_once_and_reads_as_draining(
    engine: tuple[TestClient, TokenizerManager],
) -> None:
    client, manager = engine
    health = HealthTracker(startup_budget_s=1800, liveness_failures=3, now=0.0)
    health.record(classify(*probe(client, manager)), 1.0, 200)  # ready first
    manager.gracefully_exit = True  # SIGTERM: SGLang finishes in-flight requests, then exits
    status, seconds = probe(client, manager)
    assert (status, seconds) == (503, 0.0)
    outcome = classify(status, seconds)
    assert outcome == "unavailable"
    for t in range(2, 12):  # however long the drain lasts
        health.record(outcome, float(t), status)
    assert health.draining
    assert not health.readiness(12.0).ok  # out of the Service
    assert health.liveness(12.0).ok  # never restarted for draining


def test_a_starting_engine_answers_503_at_once_and_reads_as_starting(
    engine: tuple[TestClient, TokenizerManager],
) -> None:
    client, manager = engine
    manager.server_status = ServerStatus.Starting  # port open, warm-up not done
    status, seconds = probe(client, manager)
    assert (status, seconds) == (503, 0.0)
    health = HealthTracker(startup_budget_s=1800, liveness_failures=3, now=0.0)
    for t in range(1, 10):
        health.record(classify(status, seconds), float(t), status)
    assert "starting" in health.startup(10.0).reason
    assert health.liveness(10.0).ok and not health.draining


@pytest.mark.parametrize("timeout_setting", ["default", 1])
def test_a_stuck_scheduler_answers_503_late_and_reads_as_stuck(
    engine: tuple[TestClient, TokenizerManager], monkeypatch: pytest.MonkeyPatch,
    timeout_setting: str | int,
) -> None:  # fmt: skip
    """SGLANG_HEALTH_CHECK_TIMEOUT (SGLang's default, 20 s; any value of 1 s or more)."""
    client, manager = engine
    default = timeout_setting == "default"
    check_timeout_s = http_server.HEALTH_CHECK_TIMEOUT if default else int(timeout_setting)
    monkeypatch.setattr(http_server, "HEALTH_CHECK_TIMEOUT", check_timeout_s)
    health = HealthTracker(startup_budget_s=1800, liveness_failures=3, now=0.0)
    health.record(classify(*probe(client, manager)), 1.0, 200)  # ready first
    manager.stuck = True
    status, seconds = probe(client, manager)
    assert status == 503 and manager.server_status == ServerStatus.UnHealthy
    assert seconds >= max(check_timeout_s, 1) >= STUCK_503_MIN_S  # one 1 s round at least
    outcome = classify(status, seconds)
    assert outcome == "unhealthy" and outcome in HARD_FAILURES
    if default:
        # With the default, SGLang's answer comes after the sidecar gave up (10 s): the sidecar
        # sees a timeout, which counts the same.
        assert seconds > Settings.model_fields["health_timeout_s"].default
        assert "timeout" in HARD_FAILURES
    for t in (2.0, 3.0, 4.0):
        health.record(outcome, t, status)
    assert not health.liveness(4.0).ok and not health.draining
