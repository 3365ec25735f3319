"""Side by side with sglang.benchmark.serving (from the SGLang wheel in .venv) on one simulator.

Same simulator, dataset (random-ids with --tokenize-prompt), lengths, seed and local tokenizer:
throughputs within 2%, mean TTFT and TPOT within 3%. Both tools run one after the other on the same
two loaded cores; the simulator's TTFT is 200 ms so that the few milliseconds each client spends
sending (sglang's own overshoot reaches +10 ms at CONC 10 under load) stay a small part of what is
compared; the 50 ms comparison, with each tool's error, is in `make perf-loadtest`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwen_npu.sim.testing import running_sim

from .benchrun import REPO, bench

pytestmark = [pytest.mark.slow, pytest.mark.sglang]

CONC, NUM, IN_LEN, OUT_LEN = 10, 30, 256, 50
TTFT_MS, ITL_MS = 200.0, 10.0


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with running_sim(ttft_ms=TTFT_MS, itl_ms=ITL_MS, health_check_poll_s=0.05) as url:
        yield url


def run_sglang_bench(url: str, tokenizer: Path, out: Path) -> dict[str, object]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO / "tests" / "stubs"))
    cmd = [
        sys.executable, "-W", "ignore", "-m", "sglang.benchmark.serving",
        "--backend", "sglang", "--base-url", url, "--dataset-name", "random-ids",
        "--num-prompts", str(NUM), "--random-input-len", str(IN_LEN),
        "--random-output-len", str(OUT_LEN), "--random-range-ratio", "1.0",
        "--request-rate", "inf", "--max-concurrency", str(CONC), "--tokenize-prompt",
        "--tokenizer", str(tokenizer), "--model", str(tokenizer), "--seed", "42",
        "--disable-tqdm", "--output-file", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert isinstance(rec, dict)
    return rec


def test_same_figures_as_sglang_benchmark_serving(
    sim: str, tokenizer_dir: Path, tmp_path: Path
) -> None:
    theirs = run_sglang_bench(sim, tokenizer_dir, tmp_path / "sglang.jsonl")
    proc, recs = bench(
        sim, tmp_path / "ours.jsonl", "-c", str(CONC), "--num-prompts", str(NUM),
        "--input-len", str(IN_LEN), "--output-len", str(OUT_LEN), "--seed", "42",
        "--tokenizer", str(tokenizer_dir),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (ours,) = recs
    for key in ("completed", "total_input_tokens", "total_output_tokens", "max_concurrency"):
        assert ours[key] == theirs[key], key
    # Within 2% (3% for TTFT and TPOT) of sglang's figure, or closer to the simulator's truth than
    # sglang's: under heavy load sglang's client falls behind (its throughput 8% under the truth
    # at load average 11, ours 2.5%), and being more accurate than it is no failure.
    waves = -(-NUM // CONC)
    e2e_s = (TTFT_MS + (OUT_LEN - 1) * ITL_MS) / 1000.0
    req_tput = NUM / (waves * e2e_s)
    truth = {
        "request_throughput": req_tput,
        "input_throughput": req_tput * IN_LEN,
        "output_throughput": req_tput * OUT_LEN,
        "total_throughput": req_tput * (IN_LEN + OUT_LEN),
        "mean_ttft_ms": TTFT_MS,
        "mean_tpot_ms": ITL_MS,
    }
    for key, rel in (*((k, 0.02) for k in list(truth)[:4]), ("mean_ttft_ms", 0.03),
                     ("mean_tpot_ms", 0.03)):  # fmt: skip
        same = ours[key] == pytest.approx(theirs[key], rel=rel)
        closer = abs(ours[key] - truth[key]) < abs(float(theirs[key]) - truth[key])  # type: ignore[arg-type]
        assert same or closer, (key, ours[key], theirs[key], truth[key])
    # Existing tooling reads our line: every key sglang wrote is in ours, except the extras it
    # writes for features we do not have (goodput, cache report).
    missing = set(theirs) - set(ours)
    assert not missing, missing
