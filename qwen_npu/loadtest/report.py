"""The run's record and its table: one JSONL line per run, one table column per concurrency.

The JSONL line carries sglang.benchmark.serving's keys with its meanings (so tooling written for
``--output-file`` reads ours) plus our own (failed requests and reasons, verdict, target, workers,
seed, the accept length's source). Lines are appended, never rewritten.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qwen_npu import __version__
from qwen_npu.loadtest.metrics import BenchmarkMetrics

if TYPE_CHECKING:
    from qwen_npu.loadtest.config import BenchConfig

UPSTREAM_BACKEND = {"generate": "sglang", "openai": "sglang-oai"}


@dataclass(frozen=True)
class RunInfo:
    """The arguments of one run, as written beside the figures."""

    target: str
    api: str
    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    range_ratio: float
    seed: int
    vocab_size: int
    workers: int = 0
    dataset: str = "random-ids"
    tag: str | None = None

    @classmethod
    def of(cls, config: BenchConfig) -> RunInfo:
        """The run's arguments from its bench config."""
        d = config.data
        return cls(
            target=config.target,
            api=config.api,
            concurrency=config.concurrency,
            num_prompts=d.num_prompts,
            input_len=d.input_len,
            output_len=d.output_len,
            range_ratio=d.range_ratio,
            seed=d.seed,
            vocab_size=d.vocab_size,
            workers=config.workers,
            dataset=config.dataset,
            tag=config.tag,
        )


def verdict(metrics: BenchmarkMetrics, expected: int, interrupted: bool) -> str:
    """``pass`` (all measured, all succeeded), ``degraded``, ``fail`` or ``interrupted``."""
    if interrupted:
        return "interrupted"
    if metrics.completed == 0:
        return "fail"
    if metrics.failed or metrics.completed < expected:
        return "degraded"
    return "pass"


def build_record(
    info: RunInfo,
    metrics: BenchmarkMetrics,
    *,
    accept_length: float | None,
    server_info: Any = None,
    interrupted: bool = False,
) -> dict[str, Any]:
    """The JSONL record: upstream's keys first, then ours."""
    m = metrics.as_dict()
    rec: dict[str, Any] = {
        "tag": info.tag,
        "backend": UPSTREAM_BACKEND.get(info.api, info.api),
        "dataset_name": info.dataset,
        "request_rate": math.inf,
        "max_concurrency": info.concurrency,
        "sharegpt_output_len": None,
        "random_input_len": info.input_len,
        "random_output_len": info.output_len,
        "random_range_ratio": info.range_ratio,
        "server_info": server_info,
        "duration": m["duration"],
        "completed": m["completed"],
        "total_input_tokens": m["total_input_tokens"],
        "total_input_text_tokens": m["total_input_tokens"],
        "total_input_vision_tokens": 0,
        "total_output_tokens": m["total_output_tokens"],
        # We do not re-tokenize the text; the server's count stands in for it.
        "total_output_tokens_retokenized": m["total_output_tokens"],
    }
    for key, value in m.items():
        if key not in rec and key not in ("failed", "errors", "max_itl_ms"):
            rec[key] = value
    rec["accept_length"] = accept_length
    rec.update(
        {
            "tool": "qwen-npu-bench",
            "qwen_npu_version": __version__,
            "timestamp": time.time(),
            "target": info.target,
            "api": info.api,
            "num_prompts": info.num_prompts,
            "seed": info.seed,
            "vocab_size": info.vocab_size,
            "workers": info.workers,
            "failed": metrics.failed,
            "errors": m["errors"],
            "max_itl_ms": m["max_itl_ms"],
            "accept_length_source": "metrics-delta" if accept_length is not None else None,
            "interrupted": interrupted,
            "verdict": verdict(metrics, info.num_prompts, interrupted),
        }
    )
    return rec


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one line (the parent folder is created)."""
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
    headers = ["Metric"] + [f"Concurrency {r.get('max_concurrency')}" for r in records]
    rows = [headers]
    for label, key, fmt in TABLE_ROWS:
        rows.append([label] + [_cell(fmt, r.get(key)) for r in records])
    widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(rows):
        tail = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        cells = [row[0].ljust(widths[0]), *tail]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_errors(record: dict[str, Any]) -> str:
    """One line per failure reason, or an empty string when nothing failed."""
    errors = record.get("errors") or {}
    return "\n".join(f"  failed: {count} x {reason}" for reason, count in errors.items())
