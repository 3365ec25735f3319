"""The run's record and its table: one JSONL line per run, one table column per concurrency.

The line carries sglang.benchmark.serving's keys with its meanings (so tooling written for its
``--output-file`` reads ours) plus our own (docs/loadtest.md lists both). Lines are only appended.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qwen_npu import __version__
from qwen_npu.loadtest.compare_stats import grid

if TYPE_CHECKING:
    from qwen_npu.loadtest.config import BenchConfig

UPSTREAM_BACKEND = {"generate": "sglang", "openai": "sglang-oai"}
OURS_ONLY = ("failed", "errors", "max_itl_ms")


def verdict(metrics: dict[str, Any], expected: int, interrupted: bool) -> str:
    if interrupted:
        return "interrupted"
    if metrics["completed"] == 0:
        return "fail"
    if metrics["failed"] or metrics["completed"] < expected:
        return "degraded"
    return "pass"


def build_record(
    config: BenchConfig,
    metrics: dict[str, Any],
    *,
    accept_length: float | None,
    server_info: Any = None,
    interrupted: bool = False,
) -> dict[str, Any]:
    """The JSONL record (``metrics`` from calculate_metrics): upstream's keys first, then ours."""
    d = config.data
    rec: dict[str, Any] = {
        "tag": config.tag,
        "backend": UPSTREAM_BACKEND.get(config.api, config.api),
        "dataset_name": config.dataset,
        "request_rate": math.inf,
        "max_concurrency": config.concurrency,
        "sharegpt_output_len": None,
        "random_input_len": d.input_len,
        "random_output_len": d.output_len,
        "random_range_ratio": d.range_ratio,
        "server_info": server_info,
        "duration": metrics["duration"],
        "completed": metrics["completed"],
        "total_input_tokens": metrics["total_input_tokens"],
        "total_input_text_tokens": metrics["total_input_tokens"],
        "total_input_vision_tokens": 0,
        "total_output_tokens": metrics["total_output_tokens"],
        # We do not re-tokenize the text; the server's count stands in for it.
        "total_output_tokens_retokenized": metrics["total_output_tokens"],
    }
    rec.update({k: v for k, v in metrics.items() if k not in rec and k not in OURS_ONLY})
    rec.update(
        accept_length=accept_length,
        tool="qwen-npu-bench",
        qwen_npu_version=__version__,
        timestamp=time.time(),
        target=config.target,
        api=config.api,
        num_prompts=d.num_prompts,
        seed=d.seed,
        vocab_size=d.vocab_size,
        workers=config.workers,
        **{k: metrics[k] for k in OURS_ONLY},
        accept_length_source="metrics-delta" if accept_length is not None else None,
        interrupted=interrupted,
        verdict=verdict(metrics, d.num_prompts, interrupted),
    )
    return rec


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a") as f:
        f.write(json.dumps(record) + "\n")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a JSONL file; a bad line raises ValueError naming the file and line."""
    p = Path(path)
    records = []
    for n, line in enumerate(p.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}:{n}: not a JSON line ({exc.msg}); remove or fix it") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{p}:{n}: not a JSON object; remove or fix it")
        records.append(rec)
    return records


# (label, key, format) rows of the table, the upstream pull request's rows first.
TABLE_ROWS: tuple[tuple[str, str, str], ...] = (
    ("Benchmark Duration (s)", "duration", "{:.1f}"),
    ("Successful Requests", "completed", "{:d}"),
    ("Failed Requests", "failed", "{:d}"),
    ("Request Throughput (req/s)", "request_throughput", "{:.2f}"),
    ("Input Throughput (tok/s)", "input_throughput", "{:.1f}"),
    ("Output Throughput (tok/s)", "output_throughput", "{:.1f}"),
    ("Total Throughput (tok/s)", "total_throughput", "{:.1f}"),
    ("Mean E2E Latency (ms)", "mean_e2e_latency_ms", "{:.0f}"),
    ("Mean TTFT (ms)", "mean_ttft_ms", "{:.1f}"),
    ("Mean TPOT (ms/tok)", "mean_tpot_ms", "{:.2f}"),
    ("Median TTFT (ms)", "median_ttft_ms", "{:.1f}"),
    ("P99 TTFT (ms)", "p99_ttft_ms", "{:.1f}"),
    ("P99 TPOT (ms/tok)", "p99_tpot_ms", "{:.2f}"),
    ("Mean ITL (ms)", "mean_itl_ms", "{:.2f}"),
    ("P99 ITL (ms)", "p99_itl_ms", "{:.2f}"),
    ("Concurrency", "concurrency", "{:.2f}"),
    ("Accept Length", "accept_length", "{:.2f}"),
    ("Verdict", "verdict", "{}"),
)


def _cell(fmt: str, value: Any) -> str:
    if value is None:
        return "-"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def format_table(records: Sequence[dict[str, Any]]) -> str:
    """Rows = metrics, one column per run ("Concurrency N"), as in the upstream pull request."""
    header = ["Metric"] + [f"Concurrency {r.get('max_concurrency')}" for r in records]
    return grid(
        [header] + [[lbl] + [_cell(f, r.get(k)) for r in records] for lbl, k, f in TABLE_ROWS]
    )


def format_errors(record: dict[str, Any]) -> str:
    """One line per failure reason, or an empty string when nothing failed."""
    errors = record.get("errors") or {}
    return "\n".join(f"  failed: {count} x {reason}" for reason, count in errors.items())
