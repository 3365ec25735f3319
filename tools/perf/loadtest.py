"""``make perf-loadtest``: both clients against an independent truth server; one process's capacity.

The truth server (fixtures/truth_server.py, no simulator code) logs when it received each request
and emitted its tokens: a run's error is the client's mean minus the server's own over the same
requests. Capacity: one locust process on the simulator, concurrency rising until timings drift.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from fixtures.tokenizer import build_tokenizer
from fixtures.truth_server import summarize as truth_summary
from qwen_npu import processes
from qwen_npu.loadtest.compare_stats import Spread, beats
from qwen_npu.sim.testing import running_sim
from tools.paths import REPO
from tools.perf.report import run

TTFT, ITL, IN_LEN, OUT_LEN = 50.0, 10.0, 256, 100
E2E = TTFT + (OUT_LEN - 1) * ITL
NUM = {1: 12, 10: 50, 64: 256}
REPS = 3  # runs per tool and CONC


def ours(
    url: str, conc: int, num: int, tok: Path, out: Path, workers: int = 0, client: str = "wire"
) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "qwen_npu", "bench", "--target", url, "-c", str(conc),
           "--num-prompts", str(num), "--input-len", str(IN_LEN), "--output-len", str(OUT_LEN),
           "--tokenizer", str(tok), "--workers", str(workers), "--output", str(out)]  # fmt: skip
    env = dict(os.environ, QWEN_NPU_BENCH_CLIENT=client)
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO, timeout=600, env=env)
    return dict(json.loads(out.read_text().splitlines()[-1]))


def sglang(url: str, conc: int, num: int, tok: Path, out: Path) -> dict[str, Any]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO / "tests" / "stubs"))
    cmd = [sys.executable, "-W", "ignore", "-m", "sglang.benchmark.serving", "--backend", "sglang",
           "--base-url", url, "--dataset-name", "random-ids", "--num-prompts", str(num),
           "--random-input-len", str(IN_LEN), "--random-output-len", str(OUT_LEN),
           "--random-range-ratio", "1.0", "--request-rate", "inf", "--max-concurrency", str(conc),
           "--tokenize-prompt", "--tokenizer", str(tok), "--model", str(tok), "--disable-tqdm",
           "--output-file", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO, env=env, timeout=600)
    return dict(json.loads(out.read_text().splitlines()[-1]))


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _truth_log(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(url + "/truth/log?clear=1", timeout=10) as resp:
        return list(json.loads(resp.read()))


# Errors per run: client figure minus the server's own (ms; throughput in % of the server's).
ERROR_KEYS = ("mean_ttft_ms", "mean_tpot_ms", "mean_e2e_latency_ms", "output_throughput")
ERROR_TITLES = ("TTFT err ms", "TPOT err ms", "E2E err ms", "tok/s err %")


def run_errors(record: dict[str, Any], server: dict[str, float]) -> dict[str, float]:
    errors = {k: float(record[k]) - server[k] for k in ERROR_KEYS[:3]}
    truth_tput = server["n"] * OUT_LEN / server["span_s"]
    errors["output_throughput"] = (float(record["output_throughput"]) - truth_tput) / truth_tput
    errors["output_throughput"] *= 100.0
    return errors


def tool_verdict(
    mine: list[dict[str, float]], theirs: list[dict[str, float]]
) -> tuple[list[str], list[str]]:
    """(figures where ours is better, where it is worse): |error| ranges that do not overlap."""
    better, worse = [], []
    for key, title in zip(ERROR_KEYS, ERROR_TITLES, strict=True):
        a = Spread.of([abs(e[key]) for e in mine])
        b = Spread.of([abs(e[key]) for e in theirs])
        if beats(a, b, "lower"):
            better.append(title)
        elif beats(b, a, "lower"):
            worse.append(title)
    return better, worse


# The bench with its previous client: requests/urllib3 streaming, no pre-warmed connections.
REQUESTS_CLIENT = "qwen-npu bench, previous client"


def accuracy(tok: Path, tmp: Path, reps: int) -> list[str]:
    """Both tools against the truth server, alternating, ``reps`` runs per tool and CONC."""
    titles = " | ".join(f"{t} median (range)" for t in ERROR_TITLES)
    rows = [
        f"| CONC | tool | {titles} | server TTFT ms | client CPU µs/token |",
        "|---|---|---|---|---|---|---|---|",
    ]
    tools: list[tuple[str, Any]] = [
        ("qwen-npu bench", ours),
        ("sglang.benchmark.serving", sglang),
        (REQUESTS_CLIENT, functools.partial(ours, client="requests")),
    ]
    verdicts: list[str] = []
    port = processes.free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "fixtures.truth_server", "--port", str(port),
           "--ttft-ms", str(TTFT), "--itl-ms", str(ITL)]  # fmt: skip
    bench_startup = _cpu_of([sys.executable, "-c", "import qwen_npu.loadtest.runner"])
    startup = {"qwen-npu bench": bench_startup, REQUESTS_CLIENT: bench_startup}
    with processes.running(cmd, ready_url=url + "/health", log=tmp / "truth.log"):
        for conc in (1, 10, 64):
            num = NUM[conc]
            errs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in tools}
            servers: dict[str, list[float]] = {name: [] for name, _ in tools}
            cpus: dict[str, list[float]] = {name: [] for name, _ in tools}
            for rep in range(reps):
                # Alternate the order too, so that neither tool always runs first.
                order = tools if rep % 2 == 0 else tools[::-1]
                for name, fn in order:
                    _truth_log(url)
                    before = _children_cpu_s()
                    rec = fn(url, conc, num, tok, tmp / f"{name[:6]}-{conc}-{rep}.jsonl")
                    cpu = _children_cpu_s() - before
                    cpus[name].append(
                        (cpu - startup.get(name, 0.0)) / max(rec["total_output_tokens"], 1)
                    )
                    server = truth_summary(_truth_log(url))
                    assert server["n"] == num, (name, conc, server)
                    errs[name].append(run_errors(rec, server))
                    servers[name].append(server["mean_ttft_ms"])
            for name, _ in tools:
                cells = []
                for key in ERROR_KEYS:
                    sp = Spread.of([e[key] for e in errs[name]])
                    cells.append(f"{sp.median:+.2f} ({sp.lo:+.2f}..{sp.hi:+.2f})")
                cpu_cell = f"{statistics.median(cpus[name]) * 1e6:.0f}" if name in startup else "-"
                rows.append(
                    f"| {conc} | {name} | {' | '.join(cells)} | "
                    f"{statistics.median(servers[name]):.2f} | {cpu_cell} |"
                )
                print(rows[-1], flush=True)
            better, worse = tool_verdict(errs[tools[0][0]], errs[tools[1][0]])
            verdicts.append(
                f"CONC {conc}: ours better in {', '.join(better) or 'nothing'}; "
                f"worse in {', '.join(worse) or 'nothing'}"
            )
    rows += [
        "",
        "Verdicts (|error| ranges over the repeats do not overlap; otherwise no verdict): "
        + "; ".join(verdicts)
        + ".",
    ]
    print(rows[-1], flush=True)
    return rows


def _cpu_of(cmd: list[str]) -> float:
    before = _children_cpu_s()
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO, timeout=120)
    return _children_cpu_s() - before


def capacity(tok: Path, tmp: Path) -> list[str]:
    rows = [
        "| WORKERS | CONC | streamed tok/s | mean TPOT ms (err) | median ITL ms | p90 ITL ms "
        "| p99 ITL ms | mean TTFT ms | client CPU µs/token | timings within 5% |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    # CPU of starting a bench process (imports), taken off each run's CPU.
    startup = _cpu_of([sys.executable, "-c", "import qwen_npu.loadtest.runner"])
    with running_sim(ttft_ms=TTFT, itl_ms=ITL, max_running_requests=1024) as url:
        for workers in (0, 2):
            ref: dict[str, float] = {}
            for conc in (32, 64, 128, 256, 512):
                before = _children_cpu_s()
                r = ours(url, conc, conc * 3, tok, tmp / f"cap-{workers}-{conc}.jsonl", workers)
                cpu = _children_cpu_s() - before - startup * (1 + workers)
                per_token_us = cpu / max(r["total_output_tokens"], 1) * 1e6
                # Per-token gaps carry the simulator's ~1 ms timer grid even when idle, so the
                # ITL percentiles are compared with the lowest concurrency's, TPOT with the truth.
                ref = ref or {k: r[k] for k in ("median_itl_ms", "p90_itl_ms")}
                ok = abs(r["mean_tpot_ms"] - ITL) / ITL <= 0.05 and all(
                    abs(r[k] - v) / v <= 0.05 for k, v in ref.items()
                )
                rows.append(
                    f"| {workers} | {conc} | {r['output_throughput']:.0f} | "
                    f"{r['mean_tpot_ms']:.2f} ({r['mean_tpot_ms'] - ITL:+.2f}) | "
                    f"{r['median_itl_ms']:.2f} | "
                    f"{r['p90_itl_ms']:.2f} | {r['p99_itl_ms']:.1f} | {r['mean_ttft_ms']:.1f} | "
                    f"{per_token_us:.0f} | {'yes' if ok else 'no'} |"
                )
                print(rows[-1], flush=True)
                if not ok:
                    break
    return rows


def report() -> list[str]:
    started = time.time()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        tok = build_tokenizer(tmp / "tok")
        lines = [
            "# Load test: accuracy against an independent truth server, and capacity",
            "",
            f"Truth server: first token {TTFT:.0f} ms after it reads the request line, then one "
            f"every {ITL:.0f} ms; {IN_LEN} tokens in, {OUT_LEN} out; random-ids, seed 42. Errors "
            "are the client's mean minus the server's own mean over the same requests. "
            f"Machine: {os.cpu_count()} cores shared by client, server and other work.",
            "",
            "## Both tools against the truth server",
            "",
            f"{REPS} alternating runs per tool and concurrency: median error (min..max). "
            f"Load average at the start: {os.getloadavg()[0]:.1f}.",
            "",
            *accuracy(tok, tmp, REPS),
            "",
            "## Capacity of one locust process (and WORKERS=2)",
            "",
            "Concurrency rises until mean TPOT drifts more than 5% from the truth, or the "
            "median or p90 ITL more than 5% from their values at CONC 32; the streamed token "
            "rate at the last 'yes' row is the capacity. Client CPU: the bench process and "
            "its workers, start-up imports taken off. "
            f"Load average at the start: {os.getloadavg()[0]:.1f}.",
            "",
            *capacity(tok, tmp),
            "",
            f"Took {time.time() - started:.0f} s; load average at the end "
            f"{os.getloadavg()[0]:.1f}.",
            "",
        ]
    return lines


if __name__ == "__main__":
    raise SystemExit(run("loadtest", report))
