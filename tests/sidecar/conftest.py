"""Fixtures of the sidecar tests: fast settings, a programmable fake engine, module-scoped clients.

``FakeEngine`` answers the sidecar's four engine calls through ``httpx.MockTransport`` (no sockets);
tests flip its attributes to make the engine slow, wrong, huge or gone. Tests against the real
simulator (a subprocess) use ``qwen_npu.sim.testing.running_sim``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from qwen_npu.sidecar.app import create_app
from qwen_npu.sidecar.config import Settings, load_settings

#: Intervals short enough that every scenario settles in well under a second.
FAST: dict[str, Any] = {
    "poll_interval_s": 0.05,
    "info_interval_s": 0.1,
    "health_timeout_s": 0.5,
    "request_timeout_s": 0.5,
    "canary_interval_s": 0.15,
    "canary_timeout_s": 2.0,
    "liveness_failures": 2,
    "startup_budget_s": 60.0,
}

NORMAL_TEXT = (
    "Mercury is the smallest planet. Venus is the hottest planet. Earth has liquid water. "
    "Mars has the tallest volcano. Jupiter is the largest planet. Saturn has bright rings."
)


def fast_settings(**overrides: Any) -> Settings:
    return load_settings(**{**FAST, **overrides})


def metric(client: TestClient, name: str, *, scrape: str | None = None, **labels: str) -> float:
    """One sample's value from the sidecar's /metrics (NaN parsed as such); KeyError if absent.
    ``scrape``: an exposition already fetched, for values that must come from one scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    text = client.get("/metrics").text if scrape is None else scrape
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise KeyError(f"{name}{labels} not in /metrics")


class FakeEngine:
    """An SGLang-shaped engine behind MockTransport; every attribute can change at run time."""

    def __init__(self) -> None:
        self.health_status = 200
        self.health_delay_s = 0.0
        self.health_in_flight = 0  # /health_generate exchanges started and not yet answered
        self.refuse = False
        self.spec_algorithm: str | None = "NEXTN"
        self.num_steps = 3
        self.num_draft_tokens = 4
        self.server_info_body: bytes | None = None  # raw override
        self.server_info_headers: dict[str, str] = {}
        self.generate_status = 200
        self.generate_text = NORMAL_TEXT
        self.calls: dict[str, int] = {}
        self.auth_headers: list[str | None] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls[path] = self.calls.get(path, 0) + 1
        self.auth_headers.append(request.headers.get("authorization"))
        if self.refuse:
            raise httpx.ConnectError("connection refused", request=request)
        if path == "/health_generate":
            self.health_in_flight += 1
            try:
                if self.health_delay_s:
                    await asyncio.sleep(self.health_delay_s)
            finally:
                self.health_in_flight -= 1
            return httpx.Response(self.health_status)
        if path == "/server_info":
            if self.server_info_body is not None:
                return httpx.Response(
                    200, content=self.server_info_body, headers=self.server_info_headers
                )
            return httpx.Response(
                200,
                json={
                    "speculative_algorithm": self.spec_algorithm,
                    "speculative_num_steps": self.num_steps if self.spec_algorithm else None,
                    "speculative_num_draft_tokens": (
                        self.num_draft_tokens if self.spec_algorithm else None
                    ),
                    "version": "0.5.23",
                    "internal_states": [{"avg_spec_accept_length": 2.5}],
                },
            )
        if path == "/generate":
            body = json.loads(request.content)
            assert body["sampling_params"]["temperature"] == 0.0
            if self.generate_status != 200:
                return httpx.Response(self.generate_status, json={"error": "boom"})
            return httpx.Response(200, json={"text": self.generate_text, "meta_info": {}})
        return httpx.Response(404)


def fake_client(fake: FakeEngine, **overrides: Any) -> TestClient:
    app = create_app(fast_settings(**overrides), transport=httpx.MockTransport(fake.handle))
    return TestClient(app)


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine()


@pytest.fixture(scope="module")
def client(fake: FakeEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The sidecar app over the module's fake engine, lifespan running (loops started)."""
    state_dir: Path = tmp_path_factory.mktemp("state")
    with fake_client(fake, state_dir=state_dir) as c:
        c.state_dir = state_dir  # type: ignore[attr-defined]
        yield c
