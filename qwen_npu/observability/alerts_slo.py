"""Latency and backlog alerts on SGLang's own histograms and gauges.

The SLO alerts compare the p99 over the config's rate window with the chart's threshold, for ten
minutes, and only while the engine serves traffic (``histogram_quantile`` of no requests is NaN,
which never compares true). TP/PP ranks of one engine are folded into one series.
"""

from __future__ import annotations

from qwen_npu.observability.rules import Alert, AlertGroup


def _p99(histogram: str) -> str:
    return f"histogram_quantile(0.99, sum %(without_ranks)s (rate({histogram}_bucket[%(window)s])))"


def _p99_slo_burn(name: str, what: str, histogram: str, threshold: str) -> Alert:
    """An SLO burn alert: the p99 of ``histogram`` over the ``threshold`` value for 10 minutes."""
    return Alert(
        name=name,
        severity="warning",
        for_="10m",
        summary=f"{what.capitalize()} is over its SLO.",
        description=(
            f"p99 {what} of {{{{ $labels.model_name }}}} on {{{{ $labels.instance }}}} is"
            f" {{{{ $value | humanizeDuration }}}}, over the SLO of %({threshold})s s,"
            " for 10 minutes."
        ),
        expr=_p99(histogram) + f" > %({threshold})s",
        needs=(threshold,),
    )


TTFT_SLO_BURN = _p99_slo_burn(
    "QwenNpuTTFTSLOBurn", "time to first token", "sglang:time_to_first_token_seconds",
    "ttftP99Seconds",
)  # fmt: skip
TPOT_SLO_BURN = _p99_slo_burn(
    "QwenNpuTPOTSLOBurn", "time per output token",
    "sglang:request_time_per_output_token_seconds", "tpotP99Seconds",
)  # fmt: skip

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
