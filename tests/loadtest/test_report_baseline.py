"""The JSONL record, the table, the baseline comparison and the sweep's picture."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from qwen_npu.loadtest.backends import RequestOutput
from qwen_npu.loadtest.baseline import compare, find_baseline, parse_thresholds
from qwen_npu.loadtest.config import BenchConfig
from qwen_npu.loadtest.dataset import DatasetConfig
from qwen_npu.loadtest.metrics import calculate_metrics
from qwen_npu.loadtest.plots import write_html, write_png
from qwen_npu.loadtest.report import append_jsonl, build_record, format_table, read_jsonl

# Keys sglang.benchmark.serving 0.5.23 writes to --output-file (without goodput / cache extras).
UPSTREAM_KEYS = {
    "tag",
    "backend",
    "dataset_name",
    "request_rate",
    "max_concurrency",
    "sharegpt_output_len",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "server_info",
    "duration",
    "completed",
    "total_input_tokens",
    "total_input_text_tokens",
    "total_input_vision_tokens",
    "total_output_tokens",
    "total_output_tokens_retokenized",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "concurrency",
    "accept_length",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
} | {
    f"{s}_{m}_ms"
    for s in ("mean", "median", "std", "p90", "p95", "p99")
    for m in ("e2e_latency", "ttft", "tpot", "itl")
}


def _record(conc: int, failed: int = 0, scale: float = 1.0) -> dict[str, Any]:
    outs = [
        RequestOutput(
            index=i,
            success=True,
            prompt_len=8,
            output_len=3,
            start_time=10.0 + i,
            ttft=0.05 * scale,
            latency=(0.05 + 0.02) * scale,
            itl=[0.01 * scale] * 2,
        )
        for i in range(4)
    ] + [RequestOutput(index=9, success=False, error="HTTP 503") for _ in range(failed)]
    m = calculate_metrics(outs, duration_s=2.0 * scale)
    data = DatasetConfig(num_prompts=4 + failed, input_len=8, output_len=3, vocab_size=997)
    config = BenchConfig(target="http://127.0.0.1:1", concurrency=conc, data=data)
    return build_record(config, m, accept_length=2.5)


def test_record_has_upstream_keys_and_ours(tmp_path: Path) -> None:
    rec = _record(10)
    assert rec.keys() >= UPSTREAM_KEYS
    assert rec["backend"] == "sglang" and rec["dataset_name"] == "random-ids"
    assert math.isinf(rec["request_rate"])
    assert rec["verdict"] == "pass" and rec["failed"] == 0 and rec["accept_length"] == 2.5
    out = tmp_path / "runs" / "bench.jsonl"
    append_jsonl(out, rec)
    append_jsonl(out, _record(5, failed=2))
    lines = out.read_text().splitlines()
    assert len(lines) == 2
    back = read_jsonl(out)
    assert back[1]["verdict"] == "degraded" and back[1]["errors"] == {"HTTP 503": 2}
    assert back[0]["mean_ttft_ms"] == pytest.approx(50.0)


def test_read_jsonl_names_the_bad_line(tmp_path: Path) -> None:
    p = tmp_path / "b.jsonl"
    p.write_text(json.dumps({"a": 1}) + "\nnot json\n")
    with pytest.raises(ValueError, match=r"b\.jsonl:2"):
        read_jsonl(p)


def test_table_has_one_column_per_concurrency() -> None:
    table = format_table([_record(1), _record(5), _record(10)])
    header = table.splitlines()[0]
    assert "Concurrency 1" in header and "Concurrency 5" in header and "Concurrency 10" in header
    ttft_row = next(line for line in table.splitlines() if line.startswith("Mean TTFT (ms)"))
    assert ttft_row.split()[-3:] == ["50.0", "50.0", "50.0"]


def test_baseline_flags_a_regression_and_passes_within_threshold() -> None:
    base = _record(10)
    same = _record(10, scale=1.03)  # 3% slower: within the default thresholds
    worse = _record(10, scale=1.5)
    assert not any(f.regressed for f in compare(base, same))
    bad = {f.key for f in compare(base, worse) if f.regressed}
    assert {"output_throughput", "mean_ttft_ms", "mean_tpot_ms"} <= bad
    loose = parse_thresholds([f"{k}=100" for k in bad])
    assert not any(f.regressed for f in compare(base, worse, loose))


def test_find_baseline_matches_concurrency_and_lengths() -> None:
    a, b, c = _record(1), _record(10), _record(10, scale=2)
    assert find_baseline([a, b, c], _record(10)) is c
    assert find_baseline([a], _record(10)) is None


def test_bad_threshold_names_the_fix() -> None:
    with pytest.raises(ValueError, match="key one of"):
        parse_thresholds(["ttft=5"])
    with pytest.raises(ValueError, match="not a number"):
        parse_thresholds(["mean_ttft_ms=abc"])


def test_sweep_png_and_html(tmp_path: Path) -> None:
    recs = [_record(1), _record(5, scale=1.2), _record(10, scale=1.5)]
    png = write_png(recs, tmp_path / "sweep.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = write_html(recs, png, tmp_path / "sweep.html").read_text()
    assert "Concurrency 10" in page and "data:image/png;base64," in page
