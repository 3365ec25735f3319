"""Each fault mode of ``/sim/faults`` (and its start-time config twin), one test each."""

from __future__ import annotations

import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from qwen_npu.sim.testing import free_port, running_sim
from qwen_npu.sim.tokens import GARBLE_PERIOD

from .test_server import gen_body

# Slow: every test starts a simulator process; test-fast keeps the sim's config and timing tests.
pytestmark = pytest.mark.slow


def patch(c: httpx.Client, url: str, **faults: object) -> httpx.Response:
    r = c.patch(url + "/sim/faults", json=faults)
    assert r.status_code in (200, 202), r.text
    return r


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run `make tools` (a TEST_DEPS prerequisite of make test)"
    return subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )


def test_get_faults_lists_the_contract_keys(fault_sim: str, client: httpx.Client) -> None:
    faults = client.get(fault_sim + "/sim/faults").json()
    assert set(faults) == {
        "error_rate",
        "hang_health",
        "hang_generate",
        "crash",
        "metrics_delay_s",
        "metrics_malformed",
        "garbled",
    }


def test_bad_fault_patch_is_400(fault_sim: str, client: httpx.Client) -> None:
    for body in ({"nope": 1}, {"error_rate": 2}, {"hang_health": "yes"}, {"metrics_delay_s": -1}):
        r = client.patch(fault_sim + "/sim/faults", json=body)
        assert r.status_code == 400, body
        assert r.json()["error"]["message"]


def test_error_rate(fault_sim: str, client: httpx.Client) -> None:
    patch(client, fault_sim, error_rate=1.0)
    r = client.post(fault_sim + "/generate", json=gen_body(2))
    assert r.status_code == 500
    assert "error_rate" in r.json()["error"]["message"]
    assert client.post(fault_sim + "/v1/completions", json={"prompt": "a"}).status_code == 500
    patch(client, fault_sim, error_rate=0.5)
    codes = [client.post(fault_sim + "/generate", json=gen_body(1)).status_code for _ in range(60)]
    assert 10 < codes.count(500) < 50
    patch(client, fault_sim, error_rate=0.0)
    assert client.post(fault_sim + "/generate", json=gen_body(2)).status_code == 200


def test_error_rate_from_config(client: httpx.Client) -> None:
    with running_sim(ttft_ms=1, itl_ms=1, error_rate=1.0) as url:
        assert client.post(url + "/generate", json=gen_body(1)).status_code == 500


def test_hang_health(fault_sim: str, client: httpx.Client) -> None:
    patch(client, fault_sim, hang_health=True)
    with pytest.raises(httpx.ReadTimeout):
        client.get(fault_sim + "/health", timeout=0.5)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(lambda: httpx.get(fault_sim + "/health", timeout=10).status_code)
        time.sleep(0.3)
        assert not pending.done()
        patch(client, fault_sim, hang_health=False)
        assert pending.result(timeout=10) == 200  # a hung probe answers once the hang ends
    # Generation still works while only health hangs.
    assert client.post(fault_sim + "/generate", json=gen_body(2)).status_code == 200


def test_hang_generate_stalls_tokens_and_fails_health(client: httpx.Client) -> None:
    with running_sim(
        ttft_ms=5, itl_ms=5, health_check_timeout_s=0.5, health_check_poll_s=0.05
    ) as url:
        assert client.get(url + "/health").status_code == 200
        with client.stream("POST", url + "/generate", json={**gen_body(400), "stream": True}) as r:
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert '"completion_tokens":1' in first
            patch(client, url, hang_generate=True)
            t0 = time.perf_counter()
            # /health's 1-token generate gets no output: 503 after health-check-timeout-s.
            assert client.get(url + "/health").status_code == 503
            assert time.perf_counter() - t0 >= 0.45
            with pytest.raises(httpx.ReadTimeout):
                client.post(url + "/generate", json=gen_body(1), timeout=0.5)
            patch(client, url, hang_generate=False)
            rest = [line for line in lines if line.startswith("data: ")]
        assert rest[-1] == "data: [DONE]"
        assert '"completion_tokens":400' in rest[-2]
        assert client.get(url + "/health").status_code == 200


def test_crash_exits_1(client: httpx.Client) -> None:
    port = free_port()
    with running_sim(port=port, ttft_ms=1, itl_ms=1) as url:
        r = patch(client, url, crash=True)
        assert r.status_code == 202
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                client.get(url + "/ready", timeout=0.2)
            except httpx.TransportError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the simulator still answers after crash=true")


def test_crash_after_s_exit_status() -> None:
    proc = subprocess.run(
        [
            *__import__("sys").executable.split(),
            "-m",
            "qwen_npu",
            "sim",
            "--port",
            str(free_port()),
            "--crash-after-s",
            "0.5",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "event=crash" in proc.stderr


def test_metrics_delay(fault_sim: str, client: httpx.Client) -> None:
    patch(client, fault_sim, metrics_delay_s=0.6)
    t0 = time.perf_counter()
    assert client.get(fault_sim + "/metrics").status_code == 200
    assert time.perf_counter() - t0 >= 0.55
    with pytest.raises(httpx.ReadTimeout):
        client.get(fault_sim + "/metrics", timeout=0.2)


def assert_promtool_accepts(text: str) -> None:
    """promtool parses it; its only remarks are the colon lint that SGLang's own names draw.

    promtool 2.42 exits 3 for lint remarks and 1 for a parse error; ``sglang:*`` names (kept as
    SGLang spells them) always draw "metric names should not contain ':'", on the real engine too.
    """
    result = promtool_check(text)
    remarks = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode in (0, 3), remarks
    other = [r for r in remarks if not r.endswith("metric names should not contain ':'")]
    assert other == [], other


@pytest.mark.system
def test_metrics_malformed_is_rejected_by_promtool(fault_sim: str, client: httpx.Client) -> None:
    assert_promtool_accepts(client.get(fault_sim + "/metrics").text)
    patch(client, fault_sim, metrics_malformed=True)
    bad = client.get(fault_sim + "/metrics").text
    result = promtool_check(bad)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "parsing error" in result.stdout + result.stderr


def test_garbled_output_degenerates_into_repetition(fault_sim: str, client: httpx.Client) -> None:
    healthy = client.post(fault_sim + "/generate", json=gen_body(40)).json()["output_ids"]
    patch(client, fault_sim, garbled=True)
    garbled = client.post(fault_sim + "/generate", json=gen_body(40)).json()["output_ids"]
    after = 8  # garble-after-tokens default
    assert garbled[:after] == healthy[:after]
    tail = garbled[after:]
    assert all(tail[i] == tail[i - GARBLE_PERIOD] for i in range(GARBLE_PERIOD, len(tail)))
    patch(client, fault_sim, garbled=False)
    again = client.post(fault_sim + "/generate", json=gen_body(40)).json()["output_ids"]
    assert again == healthy  # greedy output is a function of the prompt: a golden answer holds


def test_hang_health_from_config(client: httpx.Client) -> None:
    with running_sim(ttft_ms=1, itl_ms=1, hang_health=True) as url:
        with pytest.raises(httpx.ReadTimeout):
            client.get(url + "/health", timeout=0.5)
        assert client.get(url + "/sim/faults").json()["hang_health"] is True
