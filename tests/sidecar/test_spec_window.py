"""The spec-decode sliding window over SGLang's counters, and the /metrics reader behind it."""

from __future__ import annotations

import math

import pytest

from qwen_npu.sidecar.spec_window import (
    MetricsFormatError,
    SpecCounters,
    SpecWindow,
    parse_spec_counters,
)

PAGE = """# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="q",is_streaming="true"} 300.0
sglang:generation_tokens_total{model_name="q",is_streaming="false"} 100.0
# HELP sglang:generation_tokens_created Number of generation tokens processed.
# TYPE sglang:generation_tokens_created gauge
sglang:generation_tokens_created{model_name="q",is_streaming="true"} 1.7e9
# HELP sglang:spec_verify_calls_total The number of verification forward passes.
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{model_name="q"} 160.0
# HELP sglang:spec_accept_length The average acceptance length.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="q"} 9.0
"""


def test_parse_sums_every_series_of_both_counters() -> None:
    assert parse_spec_counters(PAGE) == SpecCounters(400.0, 160.0)


def test_parse_without_the_counters_is_none() -> None:
    assert parse_spec_counters("# TYPE x gauge\nx 1\n") is None


@pytest.mark.parametrize(
    "bad",
    [
        'sglang:spec_verify_calls_total{model_name="q" 3\n',
        "sglang:generation_tokens_total one\n",
        "sglang:generation_tokens_total -5\n",
        PAGE + "sglang:num_queue_reqs not-a-number\n",  # broken elsewhere on the page
        PAGE + "this line is not exposition format\n",
    ],
)
def test_parse_rejects_garbage_in_the_counters(bad: str) -> None:
    with pytest.raises(MetricsFormatError):
        parse_spec_counters(bad)


def test_window_uses_the_delta_not_the_lifetime_average() -> None:
    window = SpecWindow(window_s=60)
    # A long healthy past (4 tokens per verify), then acceptance collapses to 1.5 at t=200.
    tokens, verifies = 400_000.0, 100_000.0
    for t in range(0, 201, 10):
        tokens, verifies = tokens + 400, verifies + 100
        window.add(t, SpecCounters(tokens, verifies))
    assert window.accept_length() == pytest.approx(4.0)
    for t in range(210, 261, 10):
        tokens, verifies = tokens + 150, verifies + 100
        window.add(t, SpecCounters(tokens, verifies))
    assert window.accept_length() == pytest.approx(1.5)
    assert window.accept_rate(num_draft_tokens=4) == pytest.approx(0.5 / 3)
    assert window.span_s() == pytest.approx(60)


def test_window_without_verifies_is_nan() -> None:
    window = SpecWindow(window_s=60)
    window.add(0, SpecCounters(10, 5))
    assert math.isnan(window.accept_length())
    window.add(10, SpecCounters(10, 5))
    assert math.isnan(window.accept_length())
    assert math.isnan(window.accept_rate(4))


def test_counter_reset_starts_the_window_over() -> None:
    window = SpecWindow(window_s=600)
    window.add(0, SpecCounters(1000, 250))
    window.add(10, SpecCounters(2000, 500))
    window.add(20, SpecCounters(30, 10))  # engine restarted
    assert window.resets == 1
    assert math.isnan(window.accept_length())
    window.add(30, SpecCounters(60, 20))
    assert window.accept_length() == pytest.approx(3.0)


def test_window_memory_is_bounded() -> None:
    window = SpecWindow(window_s=1e9, max_samples=50)
    for i in range(1000):
        window.add(i, SpecCounters(i * 3.0, float(i)))
    assert len(window._samples) == 50
    assert window.accept_length() == pytest.approx(3.0)


def test_rate_needs_more_than_one_draft_token() -> None:
    window = SpecWindow(window_s=60)
    window.add(0, SpecCounters(0, 0))
    window.add(1, SpecCounters(20, 10))
    assert math.isnan(window.accept_rate(1))
    assert window.accept_rate(3) == pytest.approx(0.5)
