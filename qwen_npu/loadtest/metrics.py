"""``calculate_metrics()``: sglang.benchmark.serving's definitions over our per-request records.

Pure (numpy only, no I/O), so the definitions are tested on hand-made records. Over successful
requests: TPOT_i = (latency_i - ttft_i) / (output_len_i - 1) when output_len_i > 1; ITL is the
token-weighted concatenation of every request's gaps; input tokens are the dataset's prompt lengths,
output tokens the server's ``completion_tokens``; throughputs divide by the run's duration;
concurrency = sum of E2E latencies / duration. Percentiles are numpy's linear interpolation; an
empty list gives 0, as upstream. Failed requests are counted, with their reasons.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from qwen_npu.loadtest.backends import RequestOutput

STAT_NAMES = ("mean", "median", "std", "p90", "p95", "p99")
SERIES = ("e2e_latency", "ttft", "tpot", "itl")


def _stats(values_s: Sequence[float]) -> dict[str, float]:
    """mean/median/std/p90/p95/p99 in milliseconds (0 for an empty list, like upstream)."""
    arr = np.asarray(values_s if len(values_s) else [0.0], dtype=float) * 1000.0
    return {
        "mean": float(np.mean(arr)),
        "median": float(np.median(arr)),
        "std": float(np.std(arr)),
        "p90": float(np.percentile(arr, 90)),
        "p95": float(np.percentile(arr, 95)),
        "p99": float(np.percentile(arr, 99)),
    }


@dataclass
class BenchmarkMetrics:
    """The figures of one run; ``as_dict()`` uses sglang.benchmark.serving's JSONL key names."""

    completed: int
    failed: int
    total_input: int
    total_output: int
    duration: float
    request_throughput: float
    input_throughput: float
    output_throughput: float
    total_throughput: float
    concurrency: float
    e2e_latency: dict[str, float]
    ttft: dict[str, float]
    tpot: dict[str, float]
    itl: dict[str, float]
    max_itl_ms: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    errors: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "duration": self.duration,
            "completed": self.completed,
            "failed": self.failed,
            "total_input_tokens": self.total_input,
            "total_output_tokens": self.total_output,
            "request_throughput": self.request_throughput,
            "input_throughput": self.input_throughput,
            "output_throughput": self.output_throughput,
            "total_throughput": self.total_throughput,
        }
        for series in SERIES:
            stats = getattr(self, series)
            for stat in STAT_NAMES:
                d[f"{stat}_{series}_ms"] = stats[stat]
        d["max_itl_ms"] = self.max_itl_ms
        d["concurrency"] = self.concurrency
        d["max_output_tokens_per_s"] = self.max_output_tokens_per_s
        d["max_concurrent_requests"] = self.max_concurrent_requests
        d["errors"] = dict(self.errors)
        return d

    def raw(self) -> dict[str, Any]:
        return asdict(self)


def _peaks(ok: Sequence[RequestOutput]) -> tuple[float, int]:
    """Peak output tokens in any 1-s bucket, peak requests overlapping a 1-s bucket."""
    if not ok:
        return 0.0, 0
    t0 = min(o.start_time for o in ok)
    t1 = max(o.start_time + o.latency for o in ok)
    n = int(np.ceil(t1 - t0)) + 1
    tokens = np.zeros(n)
    active = np.zeros(n)
    for o in ok:
        times = o.start_time + o.ttft + np.concatenate(([0.0], np.cumsum(o.itl)))
        buckets = (times - t0).astype(int)
        buckets = buckets[(buckets >= 0) & (buckets < n)]
        np.add.at(tokens, buckets, 1)
        first = int(o.start_time - t0)
        last = int(o.start_time + o.latency - t0)
        active[first : min(last + 1, n)] += 1
    return float(tokens.max()), int(active.max())


def calculate_metrics(outputs: Sequence[RequestOutput], duration_s: float) -> BenchmarkMetrics:
    """The run's metrics from its per-request outputs and its duration in seconds."""
    if duration_s <= 0:
        raise ValueError(f"duration must be positive, got {duration_s}")
    ok = [o for o in outputs if o.success]
    errors = Counter(o.error or "unknown" for o in outputs if not o.success)
    total_input = sum(o.prompt_len for o in ok)
    total_output = sum(o.output_len for o in ok)
    tpots = [(o.latency - o.ttft) / (o.output_len - 1) for o in ok if o.output_len > 1]
    itls = [x for o in ok for x in o.itl]
    e2e = [o.latency for o in ok]
    peak_tokens, peak_active = _peaks(ok)
    return BenchmarkMetrics(
        completed=len(ok),
        failed=len(outputs) - len(ok),
        total_input=total_input,
        total_output=total_output,
        duration=duration_s,
        request_throughput=len(ok) / duration_s,
        input_throughput=total_input / duration_s,
        output_throughput=total_output / duration_s,
        total_throughput=(total_input + total_output) / duration_s,
        concurrency=float(np.sum(e2e)) / duration_s if e2e else 0.0,
        e2e_latency=_stats(e2e),
        ttft=_stats([o.ttft for o in ok]),
        tpot=_stats(tpots),
        itl=_stats(itls),
        max_itl_ms=float(max(itls) * 1000.0) if itls else 0.0,
        max_output_tokens_per_s=peak_tokens,
        max_concurrent_requests=peak_active,
        errors=dict(errors.most_common()),
    )
