"""The sidecar against the real simulator and its fault modes, each with a time bound.

One simulator serves the module; each test switches its faults at run time (``PATCH /sim/faults``)
and switches them back. Slow start and crash get their own simulator. The sidecar runs in-process
(module-scoped TestClient) with short intervals, and a simulator whose health check polls every
50 ms and gives up after 1 s (SGLang: 1 s and 20 s), so each scenario settles in a few seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from qwen_npu import __version__
from qwen_npu._pins import SGLANG_VERSION
from qwen_npu.processes import wait_until
from qwen_npu.sim.testing import running_sim
from tests.sidecar.conftest import fast_settings, metric

# Slow: a simulator and a sidecar process per module; test-fast keeps test_app.py (fake engine).
pytestmark = pytest.mark.slow

SIM: dict[str, Any] = {
    "health_check_poll_s": 0.05,
    "health_check_timeout_s": 1.0,
    "ttft_ms": 2,
    "itl_ms": 1,
    "speculative_algorithm": "NEXTN",
    "accept_length": 3.0,
}
# The sidecar's probe timeout sits above the simulator's 1 s health check, as 10 s sits under
# SGLang's 20 s in production: a stuck scheduler shows as SGLang's slow 503 here.
SIDECAR: dict[str, Any] = {"health_timeout_s": 1.5, "request_timeout_s": 0.5}


def set_faults(sim_url: str, **faults: Any) -> None:
    response = httpx.patch(f"{sim_url}/sim/faults", json=faults, timeout=5)
    assert response.status_code in (200, 202), response.text


def sidecar(sim_url: str, **overrides: Any) -> TestClient:
    from qwen_npu.sidecar.app import create_app

    return TestClient(create_app(fast_settings(engine_url=sim_url, **{**SIDECAR, **overrides})))


def canary_runs(client: TestClient, result: str) -> float:
    return metric(client, "qwen_npu_canary_runs_total", result=result)


def errors(client: TestClient, kind: str) -> float:
    return metric(client, "qwen_npu_engine_errors_total", kind=kind)


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with running_sim(**SIM) as url:
        yield url


@pytest.fixture(scope="module")
def sc(sim_url: str) -> Iterator[TestClient]:
    with sidecar(sim_url) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200, what="sidecar sees sim ready")
        yield client


@pytest.fixture(autouse=True)
def healthy_again(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a fault test, switch every fault off and wait until the sidecar sees health again."""
    yield
    if "sc" in request.fixturenames:
        url, client = request.getfixturevalue("sim_url"), request.getfixturevalue("sc")
        set_faults(url, error_rate=0, hang_health=False, hang_generate=False,
                   metrics_delay_s=0, metrics_malformed=False, garbled=False)  # fmt: skip
        wait_until(lambda: client.get("/livez").status_code == 200, what="livez back to 200")
        wait_until(lambda: client.get("/readyz").status_code == 200, what="readyz back to 200")


def test_healthy_sim(sc: TestClient) -> None:
    assert [sc.get(p).status_code for p in ("/startupz", "/readyz", "/livez")] == [200, 200, 200]
    wait_until(lambda: metric(sc, "qwen_npu_spec_enabled") == 1.0, what="spec enabled")
    assert metric(sc, "qwen_npu_spec_info", algorithm="NEXTN") == 1.0
    assert metric(sc, "qwen_npu_spec_num_steps") == 3.0
    assert metric(sc, "qwen_npu_spec_num_draft_tokens") == 4.0
    versions = {"qwen_npu_version": __version__, "sglang_version": SGLANG_VERSION}
    assert metric(sc, "qwen_npu_build_info", **versions)
    wait_until(lambda: canary_runs(sc, "ok") >= 1, what="a clean canary run")
    assert metric(sc, "qwen_npu_canary_degeneration_score") < 0.2
    assert metric(sc, "qwen_npu_engine_draining") == 0.0


def test_garbled_output_moves_the_canary(sc: TestClient, sim_url: str) -> None:
    before = canary_runs(sc, "degenerated")
    set_faults(sim_url, garbled=True)
    wait_until(lambda: canary_runs(sc, "degenerated") > before, what="a degenerated canary run")
    assert metric(sc, "qwen_npu_canary_degeneration_score") > 0.5
    assert metric(sc, "qwen_npu_canary_longest_repeat_tokens") >= 30
    assert sc.get("/readyz").status_code == 200  # garbled output is not a health failure
    set_faults(sim_url, garbled=False)
    wait_until(lambda: metric(sc, "qwen_npu_canary_degeneration_score") < 0.2, what="clean again")


def test_error_burst_counts_errors_but_keeps_ready(sc: TestClient, sim_url: str) -> None:
    status_before, canary_before = errors(sc, "status"), canary_runs(sc, "error")
    set_faults(sim_url, error_rate=1.0)
    wait_until(lambda: canary_runs(sc, "error") >= canary_before + 2, what="canary errors")
    assert errors(sc, "status") >= status_before + 2
    assert [sc.get(p).status_code for p in ("/readyz", "/livez")] == [200, 200]


def test_stuck_scheduler_fails_liveness(sc: TestClient, sim_url: str) -> None:
    set_faults(sim_url, hang_generate=True)  # /health answers 503 after its 1 s check
    wait_until(lambda: sc.get("/readyz").status_code == 503, what="readyz 503")
    wait_until(lambda: sc.get("/livez").status_code == 503, what="livez 503 after 2 slow 503s")
    assert "stuck" in sc.get("/livez").json()["reason"]
    assert metric(sc, "qwen_npu_engine_draining") == 0.0
    assert metric(sc, "qwen_npu_engine_up") == 1.0
    assert sc.get("/startupz").status_code == 200


def test_hung_health_fails_liveness_and_probes_stay_fast(sc: TestClient, sim_url: str) -> None:
    set_faults(sim_url, hang_health=True)
    wait_until(lambda: sc.get("/livez").status_code == 503, what="livez 503 after 2 timeouts")
    assert "timed out" in sc.get("/livez").json()["reason"]
    assert sc.get("/readyz").status_code == 503
    assert metric(sc, "qwen_npu_engine_consecutive_failures") >= 2
    # Answered from cache: twenty probes of the sidecar start no engine probe of their own (the
    # engine probe loop is sequential and each hung probe lasts its whole timeout, so at most a
    # couple of loop probes can complete meanwhile, never one per call).
    probes = metric(sc, "qwen_npu_engine_health_probe_seconds_count")
    for _ in range(20):
        assert sc.get("/readyz").status_code == 503
    assert metric(sc, "qwen_npu_engine_health_probe_seconds_count") - probes < 20


def test_slow_start() -> None:
    with running_sim(**SIM, startup_delay_s=3.0) as url:
        t0 = time.monotonic()
        with sidecar(url) as sc:
            first = sc.get("/startupz")
            assert first.status_code == 503 and "starting" in first.json()["reason"]
            assert sc.get("/readyz").status_code == 503
            assert sc.get("/livez").status_code == 200  # loading within budget is alive
            wait_until(lambda: sc.get("/startupz").status_code == 200, what="startup passes")
            wait_until(lambda: sc.get("/readyz").status_code == 200, what="ready")
            elapsed = metric(sc, "qwen_npu_engine_startup_elapsed_seconds")
            # Most of the simulated 3 s start (less the sidecar's own start: 2 s of slack for a
            # loaded machine), at most what this test saw pass from starting the sidecar to ready.
            assert 1.0 <= elapsed <= time.monotonic() - t0
            # Frozen once ready: later health probes (a few more of them) leave it unchanged.
            probes = metric(sc, "qwen_npu_engine_health_probe_seconds_count")
            wait_until(
                lambda: metric(sc, "qwen_npu_engine_health_probe_seconds_count") >= probes + 3,
                what="three more health probes",
            )
            assert metric(sc, "qwen_npu_engine_startup_elapsed_seconds") == elapsed  # frozen
            assert metric(sc, "qwen_npu_engine_uptime_seconds") > 0


def test_slow_start_over_budget_fails_startup_and_liveness() -> None:
    with running_sim(**SIM, startup_delay_s=30) as url, sidecar(url, startup_budget_s=0.5) as sc:
        wait_until(lambda: sc.get("/livez").status_code == 503, what="livez 503 past the budget")
        assert "budget exceeded" in sc.get("/startupz").json()["reason"]
        assert metric(sc, "qwen_npu_engine_startup_elapsed_seconds") > 0.5


def test_crash() -> None:
    with running_sim(**SIM) as url, sidecar(url, canary_interval_s=0) as sc:
        wait_until(lambda: sc.get("/readyz").status_code == 200, what="ready")
        set_faults(url, crash=True)
        wait_until(lambda: sc.get("/livez").status_code == 503, what="livez 503 after refusals")
        assert sc.get("/startupz").status_code == 503  # the restarted engine must start again
        assert sc.get("/readyz").status_code == 503
        assert metric(sc, "qwen_npu_engine_restarts_total") == 1.0
        assert metric(sc, "qwen_npu_engine_up") == 0.0
        assert errors(sc, "connect") == 1.0  # the first refusal, not one per probe
