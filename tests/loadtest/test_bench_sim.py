"""The bench against servers whose timings are known, judged against what the server really did.

The reference is what the server produced in each run, not its configured timings: on two shared
cores a busy neighbour makes any server emit late, and a comparison with the configured 50/10 ms
then measures the neighbour, not the bench. The accuracy tests run against the independent truth
server (qwen_npu/loadtest/truth_server.py: first token 50 ms after it reads the request, then one
every 10 ms) and take the reference from its per-request log (GET /truth/log): TTFT = first emit
minus receive, TPOT = (last - first emit) / (tokens - 1), E2E = last emit minus receive, output
throughput over the server's span (first receive to last emit); the bench's warm-up request is the
earliest entry and is left out. Tests that need what only the simulator speaks (the OpenAI API,
speculative decoding behind /metrics) compare with the simulator's own Prometheus histograms,
scraped before and after the run (their delta holds the bench's warm-up request too).

A machine stall between the server's emit and the client's read is invisible to any server log;
when a run fails its checks and the server itself reports such a stall (it emitted late against
its own deadlines), the run is measured again, at most five times (``judge``).

Tolerances: the definitions are exact (see test_metrics.py and test_against_sglang_defs.py); what
remains is the client and the server sharing two loaded CI cores. Per-token figures (TPOT, ITL) and
throughput hold 2% of the server's own figures here. TTFT carries the send of the request and the
server's own parsing of it (sglang.benchmark.serving measures the same +2..10 ms on this machine),
so TTFT and E2E get a few milliseconds more at CONC 10; the tight comparison is in `make
perf-loadtest` (out/perf/loadtest.md). Single gaps jitter on the servers' ~1 ms timer grid while
their mean is exact, so the median ITL gets 0.5 ms.
"""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from qwen_npu import processes
from qwen_npu.serve.sim.testing import running_sim

from .benchrun import REPO, bench

TTFT_MS, ITL_MS = 50.0, 10.0
IN_LEN, OUT_LEN = 256, 100

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with running_sim(ttft_ms=TTFT_MS, itl_ms=ITL_MS, health_check_poll_s=0.05) as url:
        yield url


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The independent truth server (same timings as the simulator above), on a free port."""
    port = processes.free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "qwen_npu.loadtest.truth_server", "--port", str(port),
           "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)]  # fmt: skip
    log = tmp_path_factory.mktemp("truth") / "truth.log"
    with processes.running(cmd, ready_url=url + "/health", log=log, what="truth server", cwd=REPO):
        yield url


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return bytes(resp.read())


def truth_log(url: str) -> list[dict[str, Any]]:
    """The truth server's per-request log since the last call (the call empties it)."""
    return list(json.loads(_get(url + "/truth/log?clear=1")))


def server_figures(entries: list[dict[str, Any]], measured: int) -> dict[str, float]:
    """The server's own figures (ms; tokens/s) over the ``measured`` requests of one bench run.

    The bench's warm-up request is the earliest; anything before the measured ones is left out.
    """
    rows = sorted(entries, key=lambda e: e["recv"])
    assert len(rows) >= measured, (len(rows), measured)
    rows = rows[len(rows) - measured :]
    ttft = [(e["first"] - e["recv"]) * 1000.0 for e in rows]
    tpot = [(e["last"] - e["first"]) / max(e["tokens"] - 1, 1) * 1000.0 for e in rows]
    e2e = [(e["last"] - e["recv"]) * 1000.0 for e in rows]
    span_s = max(e["last"] for e in rows) - min(e["recv"] for e in rows)
    return {
        "mean_ttft_ms": statistics.fmean(ttft),
        "median_ttft_ms": statistics.median(ttft),
        "mean_tpot_ms": statistics.fmean(tpot),
        "median_tpot_ms": statistics.median(tpot),
        "mean_e2e_latency_ms": statistics.fmean(e2e),
        "median_e2e_latency_ms": statistics.median(e2e),
        "output_throughput": sum(e["tokens"] for e in rows) / span_s,
        "max_late_ms": max(e["max_late_ms"] for e in rows),
    }


def sim_series(url: str) -> dict[str, float]:
    """The simulator's /metrics samples by name (``x_sum``, ``x_count``), summed over labels."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(_get(url + "/metrics").decode()):
        for s in family.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def sim_mean_ms(before: dict[str, float], after: dict[str, float], name: str) -> float:
    """Mean of histogram ``name`` over the observations between two scrapes, in ms."""
    count = after.get(name + "_count", 0.0) - before.get(name + "_count", 0.0)
    assert count > 0, (name, before.get(name + "_count"), after.get(name + "_count"))
    return (after[name + "_sum"] - before.get(name + "_sum", 0.0)) / count * 1000.0


def within(value: float, truth: float, rel: float, abs_ms: float = 0.0) -> bool:
    return abs(value - truth) <= max(rel * truth, abs_ms)


#: A run is measured again (at most ATTEMPTS runs) only when its assertions failed AND the server
#: reports that the machine stalled it: it emitted more than STALL_MS after its own deadline. The
#: server cannot see the same stall hit the client between its emit and the client's read, so
#: such a run cannot judge the client at these tolerances; a run the server kept on time can.
ATTEMPTS = 5
STALL_MS = 5.0

Run = TypeVar("Run")
Proc = subprocess.CompletedProcess[str]


def judge(measure: Callable[[int], tuple[Run, float]], check: Callable[[Run], None]) -> None:
    """``check(run)`` on ``measure(attempt)``'s run; again only after a failure in a stalled run.

    ``measure`` returns the run and how late the server says it emitted (ms) during it.
    """
    for attempt in range(1, ATTEMPTS + 1):
        run, late_ms = measure(attempt)
        try:
            check(run)
            return
        except AssertionError as exc:
            note = f"attempt {attempt}/{ATTEMPTS}; server lateness {late_ms:.1f} ms"
            if attempt == ATTEMPTS or late_ms <= STALL_MS:
                exc.add_note(note)
                raise
            print(f"measuring again, the server was stalled ({note}): {exc}", file=sys.stderr)


def sim_lateness_ms(url: str) -> float:
    """The simulator's recent p99 send lateness against its own deadlines (GET /sim/stats)."""
    return float(json.loads(_get(url + "/sim/stats")).get("send_lateness_p99_ms", 0.0))


@pytest.mark.parametrize(("conc", "num", "ttft_slack_ms"), [(1, 4, 4.0), (10, 20, 12.0)])
def test_metrics_match_the_truth_servers_log(
    truth: str, tmp_path: Path, conc: int, num: int, ttft_slack_ms: float
) -> None:
    def measure(attempt: int) -> tuple[tuple[Proc, dict[str, Any], dict[str, float]], float]:
        truth_log(truth)  # empty the log: this run's requests only
        proc, recs = bench(
            truth,
            tmp_path / f"b{attempt}.jsonl",
            "-c",
            str(conc),
            "--num-prompts",
            str(num),
            "--input-len",
            str(IN_LEN),
            "--output-len",
            str(OUT_LEN),
        )
        assert proc.returncode == 0, proc.stderr
        (r,) = recs
        ref = server_figures(truth_log(truth), num)
        return (proc, r, ref), ref["max_late_ms"]

    judge(measure, lambda run: check_accuracy(*run, conc, num, ttft_slack_ms))


def check_accuracy(
    proc: Proc, r: dict[str, Any], ref: dict[str, float], conc: int, num: int, ttft_slack_ms: float
) -> None:
    assert r["completed"] == num and r["failed"] == 0 and r["verdict"] == "pass"
    assert r["total_input_tokens"] == num * IN_LEN
    assert r["total_output_tokens"] == num * OUT_LEN
    assert r["max_concurrency"] == conc
    for key in ("mean_tpot_ms", "median_tpot_ms"):
        assert within(r[key], ref[key], 0.02), (key, r[key], ref[key])
    # Every request streams OUT_LEN tokens, so the mean gap is the mean TPOT.
    assert within(r["mean_itl_ms"], ref["mean_tpot_ms"], 0.02), (r["mean_itl_ms"], ref)
    assert within(r["median_itl_ms"], ref["mean_tpot_ms"], 0.02, abs_ms=0.5), (
        r["median_itl_ms"],
        ref["mean_tpot_ms"],
    )
    for key in ("mean_ttft_ms", "median_ttft_ms"):
        assert ref[key] - 1.0 <= r[key] <= ref[key] + ttft_slack_ms, (key, r[key], ref[key])
    for key in ("mean_e2e_latency_ms", "median_e2e_latency_ms"):
        assert ref[key] - 2.0 <= r[key] <= ref[key] + ttft_slack_ms, (key, r[key], ref[key])
    # The server's span (first receive to last emit) holds the per-wave client turnaround; the
    # bench's duration adds the first send and the last delivery: 3% at most.
    truth_tput = ref["output_throughput"]
    assert within(r["output_throughput"], truth_tput, 0.03), (r["output_throughput"], truth_tput)
    assert within(r["concurrency"], min(conc, num), 0.03)
    assert r["accept_length"] is None  # the truth server has no speculative decoding
    assert "Concurrency " + str(conc) in proc.stdout and "Mean TTFT (ms)" in proc.stdout
    assert "event=progress" in proc.stderr or r["duration"] < 2.0


def test_accept_length_comes_from_the_counters_over_the_run(tmp_path: Path) -> None:
    def measure(attempt: int) -> tuple[tuple[Proc, list[dict[str, Any]], float], float]:
        with running_sim(
            ttft_ms=20, itl_ms=5, accept_length=2.5, speculative_algorithm="NEXTN"
        ) as url:
            before = sim_series(url)
            proc, recs = bench(
                url,
                tmp_path / f"a{attempt}.jsonl",
                "-c",
                "4",
                "--num-prompts",
                "16",
                "--input-len",
                "64",
                "--output-len",
                "60",
            )
            after = sim_series(url)
            late_ms = sim_lateness_ms(url)
        # The verify step the simulator really took (decode time over verify steps, from its
        # own /metrics; the bench's warm-up request is in both), not the configured 5 ms.
        decode_ms = sim_mean_ms(before, after, "sglang:e2e_request_latency_seconds")
        decode_ms -= sim_mean_ms(before, after, "sglang:time_to_first_token_seconds")
        requests = after["sglang:num_requests_total"] - before.get("sglang:num_requests_total", 0)
        steps = after["sglang:spec_verify_calls_total"]
        steps -= before.get("sglang:spec_verify_calls_total", 0.0)
        return (proc, recs, decode_ms * requests / steps), late_ms

    def check(run: tuple[Proc, list[dict[str, Any]], float]) -> None:
        proc, recs, step_ms = run
        assert proc.returncode == 0, proc.stderr
        (r,) = recs
        assert r["accept_length_source"] == "metrics-delta"
        assert 2.0 <= r["accept_length"] <= 3.0
        # With 2.5 tokens per verify step the per-token times shrink accordingly.
        assert r["mean_tpot_ms"] < step_ms * 0.6, (r["mean_tpot_ms"], step_ms)

    judge(measure, check)


def test_flaky_server_is_counted_not_fatal_and_baseline_regression_exits_1(
    tmp_path: Path,
) -> None:
    with running_sim(ttft_ms=10, itl_ms=2, error_rate=0.3, seed=3) as url:
        base = tmp_path / "base.jsonl"
        good = {
            "max_concurrency": 4,
            "random_input_len": 32,
            "random_output_len": 10,
            "output_throughput": 1e9,
            "mean_ttft_ms": 0.001,
        }
        base.write_text(json.dumps(good) + "\n")
        proc, recs = bench(
            url,
            tmp_path / "f.jsonl",
            "-c",
            "4",
            "--num-prompts",
            "30",
            "--input-len",
            "32",
            "--output-len",
            "10",
            "--baseline",
            str(base),
            "--no-warmup",
        )
    assert proc.returncode == 1
    (r,) = recs
    assert r["completed"] + r["failed"] == 30
    assert r["failed"] > 0 and r["verdict"] == "degraded"
    assert set(r["errors"]) == {"HTTP 500"} and sum(r["errors"].values()) == r["failed"]
    assert "failed:" in proc.stdout and "REGRESSION" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_target_down_is_one_clear_line(tmp_path: Path) -> None:
    proc, recs = bench("http://127.0.0.1:9", tmp_path / "d.jsonl", "--ready-timeout", "1")
    assert proc.returncode == 1 and recs == []
    assert "did not answer GET /v1/models" in proc.stderr and "Traceback" not in proc.stderr


def test_ctrl_c_writes_what_was_measured(tmp_path: Path) -> None:
    out = tmp_path / "i.jsonl"
    log = tmp_path / "bench.log"
    with running_sim(ttft_ms=10, itl_ms=20) as url:
        cmd = [sys.executable, "-m", "qwen_npu", "bench", "--target", url, "--output", str(out),
               "-c", "2", "--num-prompts", "200", "--input-len", "16",
               "--output-len", "10"]  # fmt: skip
        proc = processes.start(cmd, log=log, cwd=REPO)
        try:
            processes.wait_until(
                lambda: "event=progress" in log.read_text(errors="replace"),
                what="the bench's first progress line",
                proc=proc,
                log=log,
            )
        finally:
            returncode = processes.stop(proc, grace_s=30, sig=signal.SIGINT)
    output = log.read_text(errors="replace")
    assert returncode == 130, output
    (r,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert r["interrupted"] is True and r["verdict"] == "interrupted"
    assert 0 < r["completed"] < 200
    assert "Mean TTFT (ms)" in output


def test_openai_api_and_two_workers(sim: str, truth: str, tmp_path: Path) -> None:
    def measure_openai(attempt: int) -> tuple[tuple[Proc, list[dict[str, Any]], float], float]:
        before = sim_series(sim)  # the OpenAI API is the simulator's: its /metrics is the truth
        proc, recs = bench(
            sim,
            tmp_path / f"o{attempt}.jsonl",
            "--api",
            "openai",
            "-c",
            "4",
            "--num-prompts",
            "8",
            "--input-len",
            "64",
            "--output-len",
            "20",
        )
        after = sim_series(sim)
        # Its mean TPOT over the run (the bench's warm-up request, also 20 tokens, included).
        sim_tpot = sim_mean_ms(before, after, "sglang:request_time_per_output_token_seconds")
        return (proc, recs, sim_tpot), sim_lateness_ms(sim)

    def check_openai(run: tuple[Proc, list[dict[str, Any]], float]) -> None:
        proc, recs, sim_tpot = run
        assert proc.returncode == 0, proc.stderr
        assert recs[0]["backend"] == "sglang-oai" and recs[0]["completed"] == 8
        assert within(recs[0]["mean_tpot_ms"], sim_tpot, 0.03), (recs[0]["mean_tpot_ms"], sim_tpot)

    def measure_workers(attempt: int) -> tuple[tuple[Proc, list[dict[str, Any]], float], float]:
        truth_log(truth)  # empty the log: this run's requests only
        proc, recs = bench(
            truth,
            tmp_path / f"w{attempt}.jsonl",
            "--workers",
            "2",
            "-c",
            "4",
            "--num-prompts",
            "12",
            "--input-len",
            "64",
            "--output-len",
            "20",
        )
        ref = server_figures(truth_log(truth), 12) if proc.returncode == 0 else {"max_late_ms": 0}
        return (proc, recs, ref.get("mean_tpot_ms", 0.0)), ref["max_late_ms"]

    def check_workers(run: tuple[Proc, list[dict[str, Any]], float]) -> None:
        proc, recs, truth_tpot = run
        assert proc.returncode == 0, proc.stderr
        (r,) = recs
        assert r["workers"] == 2 and r["completed"] == 12 and r["failed"] == 0
        assert within(r["mean_tpot_ms"], truth_tpot, 0.03), (r["mean_tpot_ms"], truth_tpot)

    judge(measure_openai, check_openai)
    judge(measure_workers, check_workers)


def test_sweep_writes_table_png_and_html(sim: str, tmp_path: Path) -> None:
    out = tmp_path / "sweep.jsonl"
    proc, recs = bench(
        sim, out, "--sweep", "1 4", "--num-prompts", "4", "--input-len", "32", "--output-len", "10"
    )
    assert proc.returncode == 0, proc.stderr
    assert [r["max_concurrency"] for r in recs] == [1, 4]
    header = proc.stdout.splitlines()[0]
    assert "Concurrency 1" in header and "Concurrency 4" in header
    assert (tmp_path / "sweep.png").stat().st_size > 1000
    assert "Concurrency 4" in (tmp_path / "sweep.html").read_text()
