"""The simulator over HTTP: SGLang's wire format, the information routes, probes and behaviour."""

from __future__ import annotations

import itertools
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from qwen_npu.sim.testing import running_sim, wait_ready

# Slow: every test starts simulator processes; test-fast keeps the sim's config and timing tests.
pytestmark = pytest.mark.slow


def sse(resp: httpx.Response) -> list[Any]:
    """The data events of an SSE response, '[DONE]' kept as a string."""
    out: list[Any] = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def stream_generate(
    c: httpx.Client, url: str, body: dict[str, Any]
) -> tuple[list[Any], list[float], float]:
    """Events, their arrival times relative to the send, and the time of the first event."""
    t0 = time.perf_counter()
    events: list[Any] = []
    times: list[float] = []
    with c.stream("POST", url + "/generate", json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                times.append(time.perf_counter() - t0)
                d = line[6:]
                events.append(d if d == "[DONE]" else json.loads(d))
    return events, times, times[0]


def gen_body(n: int = 10, ids: list[int] | None = None, temperature: float = 0) -> dict[str, Any]:
    return {
        "input_ids": ids or [11, 12, 13, 14],
        "sampling_params": {"max_new_tokens": n, "temperature": temperature, "ignore_eos": True},
    }


def test_native_stream_format(plain_sim: str, client: httpx.Client) -> None:
    events, _times, ttft = stream_generate(client, plain_sim, gen_body(10))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) == 10  # one event per token without speculation
    for i, ch in enumerate(chunks, start=1):
        meta = ch["meta_info"]
        assert meta["completion_tokens"] == i
        assert meta["prompt_tokens"] == 4
        assert len(ch["output_ids"]) == i
        assert "spec_verify_ct" not in meta
    # Each chunk carries the whole text so far.
    assert chunks[-1]["text"].startswith(chunks[0]["text"])
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 10}
    assert chunks[0]["meta_info"]["finish_reason"] is None
    assert ttft >= 0.019  # ttft-ms 20


def test_native_stream_paces_tokens(client: httpx.Client) -> None:
    # Lower bounds only: a token can arrive late (a loaded machine deschedules the client, which
    # then reads several queued chunks at once) but never early, so these hold on any machine.
    with running_sim(ttft_ms=20, itl_ms=25, seed=7) as url:
        events, times, ttft = stream_generate(client, url, gen_body(10))
    assert len(events) == 11 and events[-1] == "[DONE]"
    assert ttft >= 0.019  # ttft-ms 20
    for k in range(1, 10):  # token k cannot come before ttft + k gaps of itl-ms 25
        assert times[k] >= 0.019 + k * 0.024, (k, times)


def test_non_stream_and_text_input(plain_sim: str, client: httpx.Client) -> None:
    r = client.post(plain_sim + "/generate", json=gen_body(6))
    body = r.json()
    assert r.status_code == 200
    assert body["meta_info"]["completion_tokens"] == 6
    assert len(body["output_ids"]) == 6
    r = client.post(
        plain_sim + "/generate",
        json={"text": "the quick brown fox", "sampling_params": {"max_new_tokens": 3}},
    )
    assert r.json()["meta_info"]["prompt_tokens"] == 4
    r = client.post(plain_sim + "/generate", json={"text": "x"})
    assert r.json()["meta_info"]["completion_tokens"] == 128  # SGLang's default max_new_tokens


def test_greedy_is_a_function_of_the_prompt_across_restarts(
    plain_sim: str, client: httpx.Client
) -> None:
    a = client.post(plain_sim + "/generate", json=gen_body(12)).json()
    b = client.post(plain_sim + "/generate", json=gen_body(12)).json()
    c = client.post(plain_sim + "/generate", json=gen_body(12, ids=[1, 2])).json()
    assert a["output_ids"] == b["output_ids"] != c["output_ids"]
    with running_sim(ttft_ms=1, itl_ms=1, seed=123) as other:
        d = client.post(other + "/generate", json=gen_body(12)).json()
    assert d["output_ids"] == a["output_ids"]  # same prompt, other process, other seed


def test_sampled_output_is_deterministic_with_a_seed(client: httpx.Client) -> None:
    runs = []
    for _ in range(2):
        with running_sim(ttft_ms=1, itl_ms=1, seed=5) as url:
            outs = [
                client.post(url + "/generate", json=gen_body(8, temperature=0.7)).json()
                for _ in range(3)
            ]
            runs.append([o["output_ids"] for o in outs])
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]  # sampled: each request differs


def test_bad_requests_are_400_with_a_message(plain_sim: str, client: httpx.Client) -> None:
    for body in (
        {},
        {"text": "a", "input_ids": [1]},
        {"input_ids": ["a"]},
        {"input_ids": [1], "sampling_params": {"max_new_tokens": -1}},
        {"input_ids": [1], "sampling_params": {"max_new_tokens": 10**9}},
    ):
        r = client.post(plain_sim + "/generate", json=body)
        assert r.status_code == 400, body
        assert r.json()["error"]["message"]
    r = client.post(plain_sim + "/generate", content=b"{not json")
    assert r.status_code == 400


def test_openai_completions_stream_and_usage(plain_sim: str, client: httpx.Client) -> None:
    body = {
        "model": "m",
        "prompt": "hello there",
        "max_tokens": 5,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with client.stream("POST", plain_sim + "/v1/completions", json=body) as r:
        events = sse(r)
    assert events[-1] == "[DONE]"
    texts = [e["choices"][0]["text"] for e in events[:-1] if e["choices"]]
    assert len([t for t in texts if t]) == 5
    finish = [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"]]
    assert finish[-1] == "length"
    usage = events[-2]["usage"]
    assert usage == {
        "prompt_tokens": 2,
        "completion_tokens": 5,
        "total_tokens": 7,
        "prompt_tokens_details": None,
    }
    r2 = client.post(plain_sim + "/v1/completions", json={**body, "stream": False})
    assert r2.json()["usage"]["completion_tokens"] == 5
    assert r2.json()["choices"][0]["text"] == "".join(texts)


def test_openai_chat_stream(plain_sim: str, client: httpx.Client) -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
    }
    with client.stream("POST", plain_sim + "/v1/chat/completions", json=body) as r:
        events = sse(r)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert len(content.split()) == 4
    r2 = client.post(plain_sim + "/v1/chat/completions", json={**body, "stream": False})
    assert r2.json()["choices"][0]["message"]["content"] == content
    assert r2.json()["usage"]["completion_tokens"] == 4


def test_information_routes(spec_sim: str, client: httpx.Client) -> None:
    models = client.get(spec_sim + "/v1/models").json()
    assert models["data"][0]["id"] == "Qwen/Qwen3.6-35B-A3B-w8a8-sim"
    info = client.get(spec_sim + "/model_info").json()
    assert info["is_generation"] is True and "simulator" in info
    client.post(spec_sim + "/generate", json=gen_body(40))
    server = client.get(spec_sim + "/server_info").json()
    assert server["speculative_algorithm"] == "NEXTN"
    acc = server["internal_states"][0]["avg_spec_accept_length"]
    assert 1.5 < acc <= 4.0
    assert client.get(spec_sim + "/ready").status_code == 200
    assert client.get(spec_sim + "/health").status_code == 200
    assert client.get(spec_sim + "/health_generate").status_code == 200


def test_speculative_steps_deliver_tokens_together(spec_sim: str, client: httpx.Client) -> None:
    events, _, _ = stream_generate(client, spec_sim, gen_body(200))
    chunks = events[:-1]
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    steps = [b - a for a, b in zip([0, *counts[:-1]], counts, strict=True)]
    assert steps[0] == 1  # the prefill's token
    assert max(steps) <= 4 and max(steps) > 1  # up to num-steps + 1 per verify step
    assert counts[-1] == 200
    last = chunks[-1]["meta_info"]
    assert last["spec_verify_ct"] == len(chunks) - 1
    assert abs(last["spec_accept_length"] - 200 / last["spec_verify_ct"]) < 1e-9
    assert 2.0 < last["spec_accept_length"] < 3.0  # configured mean 2.5 (200 tokens: loose)


def test_startup_delay_means_503_until_ready(client: httpx.Client) -> None:
    with running_sim(ttft_ms=1, itl_ms=1, startup_delay_s=1.5, health_check_poll_s=0.02) as url:
        assert client.get(url + "/health").status_code == 503
        assert client.get(url + "/ready").status_code == 503
        r = client.post(url + "/generate", json=gen_body(2))
        assert r.status_code == 503
        assert client.get(url + "/metrics").status_code == 200
        wait_ready(url, timeout_s=10)
        assert client.get(url + "/health").status_code == 200
        assert client.post(url + "/generate", json=gen_body(2)).status_code == 200


def _burst(url: str, n: int, body: dict[str, Any]) -> list[tuple[int, float]]:
    """n requests sent at the same moment: the clients are built (and connected) first and a
    barrier releases them together, so a loaded machine does not spread the arrivals out."""
    clients = [httpx.Client(timeout=30) for _ in range(n)]
    for c in clients:
        assert c.get(url + "/v1/models").status_code == 200  # open the connection now
    barrier = threading.Barrier(n)

    def one(c: httpx.Client) -> tuple[int, float]:
        barrier.wait(timeout=30)
        t0 = time.perf_counter()
        r = c.post(url + "/generate", json=body)
        return r.status_code, time.perf_counter() - t0

    try:
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(one, clients))
    finally:
        for c in clients:
            c.close()


def test_bounded_running_set_queues_and_ttft_grows_with_queue(client: httpx.Client) -> None:
    with running_sim(ttft_ms=10, itl_ms=20, max_running_requests=2, max_queued_requests=3) as url:
        # 20 tokens x 20 ms: every request of the burst arrives while the first two still run.
        results = _burst(url, 8, gen_body(20))
        codes = sorted(code for code, _ in results)
        # 2 running + 3 queued are served; the rest are refused as SGLang does when full.
        assert codes.count(200) >= 5 and 503 in codes
        served = sorted(t for code, t in results if code == 200)
        # Queued requests wait for a slot: the last served took about twice the first.
        assert served[-1] > served[0] * 1.6
        metrics = client.get(url + "/metrics").text
        assert "sglang:queue_time_seconds_count" in metrics


def test_prompt_length_and_batch_size_cost_time(client: httpx.Client) -> None:
    with running_sim(
        ttft_ms=5, prefill_ms_per_1k_tokens=100, itl_ms=5, itl_ms_per_running_req=10
    ) as url:
        _, _, short = stream_generate(client, url, gen_body(2, ids=[1] * 10))
        _, _, long = stream_generate(client, url, gen_body(2, ids=[1] * 2000))
        assert long - short > 0.15  # 2000 tokens at 100 ms per 1k
        _, times1, _ = stream_generate(client, url, gen_body(20))
        solo = statistics.median([b - a for a, b in itertools.pairwise(times1[1:-1])])

        # The four streams start together (a barrier) and last long enough to overlap even on
        # a loaded machine, where starting a thread and a client can take longer than 20 steps.
        together = threading.Barrier(4)

        def streamed(_: int) -> float:
            with httpx.Client(timeout=30) as c:
                together.wait(timeout=30)
                _, t, _ = stream_generate(c, url, gen_body(60))
                return statistics.median([b - a for a, b in itertools.pairwise(t[1:-1])])

        with ThreadPoolExecutor(4) as pool:
            batched = statistics.median(pool.map(streamed, range(4)))
        assert batched > solo + 0.015  # 4 running: +30 ms per step (3 x 10 ms)


def test_running_sim_stops_the_process() -> None:
    import socket

    with running_sim(ttft_ms=1, itl_ms=1) as url:
        port = int(url.rsplit(":", 1)[1])
        assert httpx.get(url + "/ready").status_code == 200
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_client_disconnect_aborts_and_frees_the_slot(client: httpx.Client) -> None:
    # One slot and a first request that would hold it for 100 s (5000 tokens x 20 ms): the
    # next request can only be admitted (and answer within the client's 10 s timeout) if the
    # disconnect freed the slot.
    with running_sim(ttft_ms=5, itl_ms=20, max_running_requests=1) as url:
        body = {**gen_body(5000), "stream": True}
        with client.stream("POST", url + "/generate", json=body) as r:
            next(line for line in r.iter_lines() if line.startswith("data: "))
        assert client.post(url + "/generate", json=gen_body(2)).status_code == 200
        metrics = client.get(url + "/metrics").text
        aborted = [
            line
            for line in metrics.splitlines()
            if line.startswith("sglang:num_aborted_requests_total")
        ]
        assert aborted and float(aborted[0].rsplit(" ", 1)[1]) == 1.0
