"""Latency and backlog alerts on SGLang's own histograms and gauges.

The SLO alerts compare the p99 over the config's rate window with the chart's threshold, for ten
minutes, and only while the engine serves traffic (``histogram_quantile`` of no requests is NaN,
which never compares true). TP/PP ranks of one engine are folded into one series.
"""

from __future__ import annotations

from qwen_npu.observability.rules import Alert, AlertGroup


def _p99(histogram: str) -> str:
    return f"histogram_quantile(0.99, sum %(without_ranks)s (rate({histogram}_bucket[%(window)s])))"


TTFT_SLO_BURN = Alert(
    name="QwenNpuTTFTSLOBurn",
    severity="warning",
    for_="10m",
    summary="Time to first token is over its SLO.",
    description=(
        "p99 time to first token of {{ $labels.model_name }} on {{ $labels.instance }} is"
        " {{ $value | humanizeDuration }}, over the SLO of %(ttftP99Seconds)s s, for 10 minutes."
    ),
    expr=_p99("sglang:time_to_first_token_seconds") + " > %(ttftP99Seconds)s",
    needs=("ttftP99Seconds",),
)

TPOT_SLO_BURN = Alert(
    name="QwenNpuTPOTSLOBurn",
    severity="warning",
    for_="10m",
    summary="Time per output token is over its SLO.",
    description=(
        "p99 time per output token of {{ $labels.model_name }} on {{ $labels.instance }} is"
        " {{ $value | humanizeDuration }}, over the SLO of %(tpotP99Seconds)s s, for 10 minutes."
    ),
    expr=_p99("sglang:request_time_per_output_token_seconds") + " > %(tpotP99Seconds)s",
    needs=("tpotP99Seconds",),
)

QUEUE_GROWING = Alert(
    name="QwenNpuQueueGrowing",
    severity="warning",
    for_="10m",
    summary="Requests are piling up in the engine's waiting queue.",
    description=(
        "{{ $value }} requests wait in the queue of {{ $labels.model_name }} on"
        " {{ $labels.instance }} (more than %(queueDepth)s, and still growing over 10 minutes)."
    ),
    expr=(
        "(max %(without_ranks)s (sglang:num_queue_reqs) > %(queueDepth)s)"
        " and (max %(without_ranks)s (deriv(sglang:num_queue_reqs[10m])) > 0)"
    ),
    needs=("queueDepth",),
)

GROUP = AlertGroup("qwen-npu.slo", (TTFT_SLO_BURN, TPOT_SLO_BURN, QUEUE_GROWING))
