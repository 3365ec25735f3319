"""SGLang 0.5.23's own ``sglang:*`` metrics that on-call watches for a Qwen3.5/3.6 MTP deployment:
names, types, labels and default buckets, read off its ``srt/observability/metrics_collector.py``.
The simulator exports them and the dashboards and alerts query them; a rename upstream is caught
by ``tests/sim/test_sglang_metrics.py``, which reads the wheel.
"""

from __future__ import annotations

from qwen_npu.metrics.spec import MetricSpec

# Labels of the scheduler collector (one series per TP/PP/EP rank) and of the tokenizer collector.
SCHEDULER_LABELS: tuple[str, ...] = (
    "model_name",
    "engine_type",
    "tp_rank",
    "pp_rank",
    "moe_ep_rank",
)
TOKENIZER_LABELS: tuple[str, ...] = ("model_name", "engine_type")
STREAMING_LABELS: tuple[str, ...] = (*TOKENIZER_LABELS, "is_streaming")

# Default buckets of SGLang 0.5.23's TokenizerMetricsCollector and SchedulerMetricsCollector.
TTFT_BUCKETS: tuple[float, ...] = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400,
)  # fmt: skip
E2E_BUCKETS: tuple[float, ...] = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800,
    2400,
)  # fmt: skip
ITL_BUCKETS: tuple[float, ...] = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
)  # fmt: skip
QUEUE_TIME_BUCKETS: tuple[float, ...] = (
    0.0, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50,
    60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800,
    2000, 2500, 3000,
)  # fmt: skip


def _gauge(name: str, help_: str, unit: str = "short") -> MetricSpec:
    return MetricSpec(f"sglang:{name}", "gauge", help_, SCHEDULER_LABELS, unit=unit)


def _counter(name: str, help_: str, labels: tuple[str, ...]) -> MetricSpec:
    return MetricSpec(f"sglang:{name}", "counter", help_, labels)


SGLANG_METRICS: tuple[MetricSpec, ...] = (
    # Scheduler gauges (SchedulerMetricsCollector).
    _gauge("num_running_reqs", "The number of running requests."),
    _gauge("num_queue_reqs", "The number of requests in the waiting queue."),
    _gauge("gen_throughput", "The generation throughput (token/s).", "short"),
    _gauge("cache_hit_rate", "The prefix cache hit rate.", "percentunit"),
    _gauge("token_usage", "The token usage.", "percentunit"),
    _gauge("mamba_usage", "The token usage for Mamba layers.", "percentunit"),
    _gauge(
        "spec_accept_length",
        "Mean acceptance length of speculative decoding (accepted drafts + bonus token per "
        "forward).",
    ),
    _gauge(
        "spec_accept_rate",
        "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
        "percentunit",
    ),
    _gauge("spec_num_steps", "Currently active speculative_num_steps."),
    _gauge(
        "spec_num_draft_tokens",
        "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
    ),
    # Tokenizer counters (TokenizerMetricsCollector).
    _counter("prompt_tokens_total", "Number of prefill tokens processed.", STREAMING_LABELS),
    _counter("generation_tokens_total", "Number of generation tokens processed.", STREAMING_LABELS),
    _counter(
        "spec_verify_calls_total",
        "Number of speculative decoding verification calls.",
        TOKENIZER_LABELS,
    ),
    _counter("num_requests_total", "Number of requests processed.", STREAMING_LABELS),
    _counter("num_aborted_requests_total", "Number of requests aborted.", TOKENIZER_LABELS),
    # Latency histograms.
    MetricSpec(
        "sglang:time_to_first_token_seconds",
        "histogram",
        "Histogram of time to first token in seconds.",
        STREAMING_LABELS,
        TTFT_BUCKETS,
        "s",
    ),
    MetricSpec(
        "sglang:inter_token_latency_seconds",
        "histogram",
        "Histogram of inter-token latency in seconds.",
        TOKENIZER_LABELS,
        ITL_BUCKETS,
        "s",
    ),
    MetricSpec(
        "sglang:request_time_per_output_token_seconds",
        "histogram",
        "Per-request TPOT in seconds: (finished_time - first_token_time) / "
        "(completion_tokens - 1).",
        STREAMING_LABELS,
        ITL_BUCKETS,
        "s",
    ),
    MetricSpec(
        "sglang:e2e_request_latency_seconds",
        "histogram",
        "Histogram of End-to-end request latency in seconds",
        STREAMING_LABELS,
        E2E_BUCKETS,
        "s",
    ),
    MetricSpec(
        "sglang:queue_time_seconds",
        "histogram",
        "Histogram of queueing time in seconds.",
        SCHEDULER_LABELS,
        QUEUE_TIME_BUCKETS,
        "s",
    ),
)
