"""calculate_metrics() on hand-made records whose answers are worked out by hand."""

from __future__ import annotations

import pytest

from qwen_npu.loadtest.backends import RequestOutput
from qwen_npu.loadtest.metrics import calculate_metrics


def _ok(i: int, ttft: float, itl: list[float], prompt_len: int = 10) -> RequestOutput:
    return RequestOutput(
        index=i,
        success=True,
        prompt_len=prompt_len,
        output_len=len(itl) + 1,
        start_time=100.0 + i,
        ttft=ttft,
        latency=ttft + sum(itl),
        itl=itl,
    )


def test_definitions_on_two_requests() -> None:
    a = _ok(0, 0.100, [0.010, 0.010, 0.010])  # 4 tokens, e2e 130 ms, tpot 10 ms
    b = _ok(1, 0.200, [0.020], prompt_len=30)  # 2 tokens, e2e 220 ms, tpot 20 ms
    m = calculate_metrics([a, b], duration_s=2.0)
    assert m["completed"] == 2 and m["failed"] == 0
    assert m["total_input_tokens"] == 40 and m["total_output_tokens"] == 6
    assert m["request_throughput"] == pytest.approx(1.0)
    assert m["input_throughput"] == pytest.approx(20.0)
    assert m["output_throughput"] == pytest.approx(3.0)
    assert m["total_throughput"] == pytest.approx(23.0)
    assert m["mean_ttft_ms"] == pytest.approx(150.0)
    assert m["mean_tpot_ms"] == pytest.approx(15.0)
    # ITL is token-weighted: three 10 ms gaps and one 20 ms gap.
    assert m["mean_itl_ms"] == pytest.approx(12.5)
    assert m["median_itl_ms"] == pytest.approx(10.0)
    assert m["mean_e2e_latency_ms"] == pytest.approx(175.0)
    assert m["concurrency"] == pytest.approx((0.130 + 0.220) / 2.0)
    assert m["max_itl_ms"] == pytest.approx(20.0)


def test_failures_are_counted_with_reasons_and_excluded() -> None:
    good = _ok(0, 0.05, [0.01] * 9)
    bad = [
        RequestOutput(index=i, success=False, prompt_len=10, error=reason)
        for i, reason in enumerate(["HTTP 500", "HTTP 500", "connection error"], start=1)
    ]
    m = calculate_metrics([good, *bad], duration_s=1.0)
    assert m["completed"] == 1 and m["failed"] == 3
    assert m["errors"] == {"HTTP 500": 2, "connection error": 1}
    assert m["total_input_tokens"] == 10
    assert m["mean_ttft_ms"] == pytest.approx(50.0)


def test_single_token_requests_have_no_tpot_and_all_failed_gives_zeros() -> None:
    one = _ok(0, 0.05, [])
    m = calculate_metrics([one], duration_s=1.0)
    assert m["mean_tpot_ms"] == 0.0 and m["p99_itl_ms"] == 0.0
    none = calculate_metrics(
        [RequestOutput(index=0, success=False, error="timeout")], duration_s=1.0
    )
    assert (
        none["completed"] == 0 and none["output_throughput"] == 0.0 and none["mean_ttft_ms"] == 0.0
    )


def test_bad_duration_is_rejected() -> None:
    with pytest.raises(ValueError, match="duration"):
        calculate_metrics([], duration_s=0.0)


def test_record_round_trip() -> None:
    a = _ok(3, 0.1, [0.01, 0.02])
    assert RequestOutput.from_dict(a.as_dict()) == a
