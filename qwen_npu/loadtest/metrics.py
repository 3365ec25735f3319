"""sglang.benchmark.serving's metric definitions over our per-request records (docs/loadtest.md).

Pure (numpy, no I/O), so the definitions are tested on hand-made records; the keys are upstream's
JSONL keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from qwen_npu.loadtest.backends import RequestOutput


def _peaks(ok: Sequence[RequestOutput]) -> tuple[float, int]:
    """Peak output tokens in any 1-s bucket, peak requests overlapping a 1-s bucket."""
    if not ok:
        return 0.0, 0
    t0 = min(o.start_time for o in ok)
    n = int(np.ceil(max(o.start_time + o.latency for o in ok) - t0)) + 1
    tokens = np.zeros(n)
    active = np.zeros(n)
    for o in ok:
        times = o.start_time + o.ttft + np.concatenate(([0.0], np.cumsum(o.itl)))
        buckets = (times - t0).astype(int)
        np.add.at(tokens, buckets[(buckets >= 0) & (buckets < n)], 1)
        active[int(o.start_time - t0) : min(int(o.start_time + o.latency - t0) + 1, n)] += 1
    return float(tokens.max()), int(active.max())


def calculate_metrics(outputs: Sequence[RequestOutput], duration_s: float) -> dict[str, Any]:
    """The run's figures over its successful requests; failures counted with their reasons."""
    if duration_s <= 0:
        raise ValueError(f"duration must be positive, got {duration_s}")
    ok = [o for o in outputs if o.success]
    total_input = sum(o.prompt_len for o in ok)
    total_output = sum(o.output_len for o in ok)
    e2e = [o.latency for o in ok]
    itls = [x for o in ok for x in o.itl]
    m: dict[str, Any] = {
        "duration": duration_s,
        "completed": len(ok),
        "failed": len(outputs) - len(ok),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / duration_s,
        "input_throughput": total_input / duration_s,
        "output_throughput": total_output / duration_s,
        "total_throughput": (total_input + total_output) / duration_s,
    }
    for name, values in (
        ("e2e_latency", e2e),
        ("ttft", [o.ttft for o in ok]),
        ("tpot", [(o.latency - o.ttft) / (o.output_len - 1) for o in ok if o.output_len > 1]),
        ("itl", itls),
    ):
        arr = (
            np.asarray(values or [0.0], dtype=float) * 1000.0
        )  # an empty list gives 0, as upstream
        m[f"mean_{name}_ms"] = float(np.mean(arr))
        m[f"median_{name}_ms"] = float(np.median(arr))
        m[f"std_{name}_ms"] = float(np.std(arr))
        for q in (90, 95, 99):
            m[f"p{q}_{name}_ms"] = float(np.percentile(arr, q))
    peak_tokens, peak_active = _peaks(ok)
    m.update(
        max_itl_ms=max(itls) * 1000.0 if itls else 0.0,
        concurrency=float(np.sum(e2e)) / duration_s if e2e else 0.0,
        max_output_tokens_per_s=peak_tokens,
        max_concurrent_requests=peak_active,
        errors=dict(Counter(o.error or "unknown" for o in outputs if not o.success).most_common()),
    )
    return m
