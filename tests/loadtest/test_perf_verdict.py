"""The verdict of `make perf-loadtest`: ours vs sglang.benchmark.serving against the truth server.

The perf run itself takes minutes; its rules are checked here on made-up runs: a run's error is
the client's figure minus the truth server's own over the same requests, and a tool is better in a
figure only where the ranges of |error| over the repeats do not overlap.
"""

from __future__ import annotations

from tools.perf.loadtest import run_errors, tool_verdict

SERVER = {"n": 100, "mean_ttft_ms": 50.5, "mean_tpot_ms": 10.0, "mean_e2e_latency_ms": 1041.0,
          "span_s": 2.0}  # fmt: skip


def _errs(ttft: float, tpot: float = 0.0, e2e: float = 0.0, tput: float = 0.0) -> dict[str, float]:
    return {"mean_ttft_ms": ttft, "mean_tpot_ms": tpot, "mean_e2e_latency_ms": e2e,
            "output_throughput": tput}  # fmt: skip


def test_a_runs_error_is_against_the_servers_own_figures() -> None:
    record = {"mean_ttft_ms": 53.0, "mean_tpot_ms": 10.01, "mean_e2e_latency_ms": 1045.0,
              "output_throughput": 4900.0}  # fmt: skip
    e = run_errors(record, SERVER)
    assert round(e["mean_ttft_ms"], 6) == 2.5
    assert round(e["mean_tpot_ms"], 6) == 0.01
    assert round(e["mean_e2e_latency_ms"], 6) == 4.0
    assert round(e["output_throughput"], 6) == -2.0  # truth 100 x 100 tokens / 2 s = 5000


def test_better_only_where_the_ranges_of_the_errors_do_not_overlap() -> None:
    mine = [_errs(1.0, tput=-0.5), _errs(2.0, tput=-1.0), _errs(-1.5, tput=-3.0)]
    theirs = [_errs(3.0, tput=-1.0), _errs(4.0, tput=-2.0), _errs(3.5, tput=-2.5)]
    better, worse = tool_verdict(mine, theirs)
    assert better == ["TTFT err ms"] and worse == []
    better, worse = tool_verdict(theirs, mine)
    assert better == [] and worse == ["TTFT err ms"]
