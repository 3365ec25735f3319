"""The "ours no worse than sglang.benchmark.serving" verdict of `make perf-loadtest`.

The perf run itself takes minutes; its verdict rule is checked here on made-up medians.
"""

from __future__ import annotations

from tools.perf.loadtest import worse_than

TRUTH = {
    "mean_ttft_ms": 50.0,
    "mean_tpot_ms": 10.0,
    "mean_itl_ms": 10.0,
    "mean_e2e_latency_ms": 1040.0,
    "output_throughput": 1000.0,
}


def test_smaller_errors_either_side_of_the_truth_are_no_worse() -> None:
    ours = {**TRUTH, "mean_ttft_ms": 48.5, "output_throughput": 995.0}
    theirs = {**TRUTH, "mean_ttft_ms": 53.7, "output_throughput": 990.0}
    assert worse_than(ours, theirs, TRUTH) == []


def test_a_larger_error_is_named_and_a_lead_within_the_slack_is_a_tie() -> None:
    ours = {**TRUTH, "mean_ttft_ms": 54.0, "mean_tpot_ms": 10.05, "output_throughput": 970.0}
    theirs = {**TRUTH, "mean_ttft_ms": 52.0, "mean_tpot_ms": 10.0, "output_throughput": 980.0}
    assert worse_than(ours, theirs, TRUTH) == ["mean_ttft_ms", "output_throughput"]
