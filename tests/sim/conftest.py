"""Fixtures for the simulator tests: simulators in subprocesses, shared per module where safe."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from qwen_npu.sim.testing import running_sim

FAULTS_OFF = {
    "error_rate": 0.0,
    "hang_health": False,
    "hang_generate": False,
    "metrics_delay_s": 0.0,
    "metrics_malformed": False,
    "garbled": False,
}


@pytest.fixture(scope="module")
def plain_sim() -> Iterator[str]:
    """A fast simulator without speculative decoding."""
    with running_sim(ttft_ms=20, itl_ms=4, health_check_poll_s=0.02, seed=7) as url:
        yield url


@pytest.fixture(scope="module")
def spec_sim() -> Iterator[str]:
    """A fast simulator with MTP-like verify steps (3 steps, mean 2.5 tokens per step)."""
    with running_sim(
        ttft_ms=20,
        itl_ms=6,
        accept_length=2.5,
        speculative_num_steps=3,
        health_check_poll_s=0.02,
    ) as url:
        yield url


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:
        yield c


@pytest.fixture
def fault_sim(plain_sim: str, client: httpx.Client) -> Iterator[str]:
    """The plain simulator, with every fault switched off again after the test."""
    yield plain_sim
    r = client.patch(plain_sim + "/sim/faults", json=FAULTS_OFF)
    assert r.status_code == 200, r.text
