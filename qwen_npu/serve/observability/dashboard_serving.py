"""The "Qwen NPU / Serving" dashboard: what users feel, per engine instance and model.

Traffic and errors, the latency quantiles SGLang exports (TTFT, TPOT, ITL, E2E, queue time),
load and cache usage, throughput, speculative acceptance and the canary. Panels that an alert
watches draw the alert's threshold and link to its runbook section.
"""

from __future__ import annotations

from qwen_npu.serve.observability.config import DEFAULT, Config
from qwen_npu.serve.observability.panels import (
    Board,
    Query,
    datasource_variable,
    query_variable,
)

FILENAME = "qwen-npu-serving.json"
TITLE = "Qwen NPU / Serving"

ENGINE = 'namespace=~"$namespace", pod=~"$pod", model_name=~"$model_name"'
SIDECAR = 'namespace=~"$namespace", pod=~"$pod"'
BY = "namespace, pod, instance, model_name"
LEGEND = "{{pod}} {{instance}} {{model_name}}"


def _quantiles(histogram: str) -> list[Query]:
    return [
        Query(
            f"histogram_quantile({q}, sum by (le, {BY}) "
            f"(rate({histogram}_bucket{{{ENGINE}}}[$__rate_interval])))",
            f"p{round(q * 100)} {LEGEND}",
        )
        for q in (0.5, 0.9, 0.99)
    ]


def build(cfg: Config = DEFAULT) -> Board:
    w = cfg.without_ranks()
    b = Board(
        TITLE,
        "SGLang engines serving Qwen3.5/3.6 with MTP on Ascend: traffic, latency, load, "
        "speculative decoding and the output canary.",
        cfg,
    )
    b.builder = (
        b.builder.with_variable(datasource_variable())
        .with_variable(
            query_variable(
                "namespace", "Namespace", "label_values(sglang:num_running_reqs, namespace)"
            )
        )
        .with_variable(
            query_variable(
                "pod",
                "Engine pod",
                'label_values(sglang:num_running_reqs{namespace=~"$namespace"}, pod)',
            )
        )
        .with_variable(
            query_variable(
                "model_name",
                "Model",
                'label_values(sglang:num_running_reqs{namespace=~"$namespace", pod=~"$pod"}, '
                "model_name)",
            )
        )
    )

    b.row("Traffic")
    b.timeseries(
        "Request rate",
        "Requests finished per second (sglang:num_requests_total), per engine and model.",
        "reqps",
        [
            Query(
                f"sum by ({BY}) (rate(sglang:num_requests_total{{{ENGINE}}}[$__rate_interval]))",
                LEGEND,
            )
        ],
        width=8,
    )
    b.timeseries(
        "Aborted requests",
        "Share of requests the engine aborted (client disconnects, timeouts, errors): "
        "sglang:num_aborted_requests_total over sglang:num_requests_total.",
        "percentunit",
        [
            Query(
                f"sum by ({BY}) (rate(sglang:num_aborted_requests_total{{{ENGINE}}}"
                f"[$__rate_interval])) / sum by ({BY}) "
                f"(rate(sglang:num_requests_total{{{ENGINE}}}[$__rate_interval]))",
                LEGEND,
            )
        ],
        width=8,
        min_val=0,
    )
    b.timeseries(
        "Token throughput",
        "Prompt (prefill) and generated tokens per second, from SGLang's token counters.",
        "suffix: tok/s",
        [
            Query(
                f"sum by ({BY}) (rate(sglang:prompt_tokens_total{{{ENGINE}}}[$__rate_interval]))",
                f"prompt {LEGEND}",
            ),
            Query(
                f"sum by ({BY}) "
                f"(rate(sglang:generation_tokens_total{{{ENGINE}}}[$__rate_interval]))",
                f"generated {LEGEND}",
            ),
        ],
        width=8,
    )

    b.row("Latency")
    b.timeseries(
        "Time to first token",
        "p50/p90/p99 of sglang:time_to_first_token_seconds. The red line is the SLO of "
        "QwenNpuTTFTSLOBurn (chart value monitoring.prometheusRule.thresholds.ttftP99Seconds), "
        "which fires when p99 stays above it for 10 minutes.",
        "s",
        _quantiles("sglang:time_to_first_token_seconds"),
        threshold="ttftP99Seconds",
        alert="QwenNpuTTFTSLOBurn",
    )
    b.timeseries(
        "Time per output token",
        "p50/p90/p99 of sglang:request_time_per_output_token_seconds (per request: decode time "
        "over output tokens). The red line is the SLO of QwenNpuTPOTSLOBurn "
        "(monitoring.prometheusRule.thresholds.tpotP99Seconds).",
        "s",
        _quantiles("sglang:request_time_per_output_token_seconds"),
        threshold="tpotP99Seconds",
        alert="QwenNpuTPOTSLOBurn",
    )
    b.timeseries(
        "Inter-token latency",
        "p50/p90/p99 of sglang:inter_token_latency_seconds (gap between streamed chunks; with "
        "MTP a chunk carries several tokens).",
        "s",
        _quantiles("sglang:inter_token_latency_seconds"),
        width=8,
    )
    b.timeseries(
        "End-to-end latency",
        "p50/p90/p99 of sglang:e2e_request_latency_seconds.",
        "s",
        _quantiles("sglang:e2e_request_latency_seconds"),
        width=8,
    )
    b.timeseries(
        "Queue time",
        "p50/p90/p99 of sglang:queue_time_seconds (waiting before the first schedule).",
        "s",
        _quantiles("sglang:queue_time_seconds"),
        width=8,
    )

    b.row("Load")
    b.timeseries(
        "Queued requests",
        "Requests waiting in the scheduler queue (sglang:num_queue_reqs). The red line is "
        "QwenNpuQueueGrowing's depth (monitoring.prometheusRule.thresholds.queueDepth).",
        "short",
        [Query(f"max {w} (sglang:num_queue_reqs{{{ENGINE}}})", LEGEND)],
        threshold="queueDepth",
        alert="QwenNpuQueueGrowing",
        width=8,
    )
    b.timeseries(
        "Running requests",
        "Requests in the running batch (sglang:num_running_reqs).",
        "short",
        [Query(f"max {w} (sglang:num_running_reqs{{{ENGINE}}})", LEGEND)],
        width=8,
    )
    b.timeseries(
        "KV and mamba cache usage",
        "Share of the KV token pool (sglang:token_usage) and of the mamba state pool "
        "(sglang:mamba_usage) in use.",
        "percentunit",
        [
            Query(f"max {w} (sglang:token_usage{{{ENGINE}}})", f"KV {LEGEND}"),
            Query(f"max {w} (sglang:mamba_usage{{{ENGINE}}})", f"mamba {LEGEND}"),
        ],
        width=8,
        min_val=0,
        max_val=1,
    )

    b.row("Speculative decoding (MTP)")
    b.timeseries(
        "Acceptance length",
        "Tokens produced per verify step: generated tokens over sglang:spec_verify_calls_total "
        "(what QwenNpuSpecAcceptanceCollapse watches, over 10 minutes there), the engine's own "
        "sglang:spec_accept_length, and the sidecar's windowed qwen_npu_spec_accept_length. "
        "Below the red line (thresholds.specAcceptLengthMin) MTP costs more than it gives.",
        "short",
        [
            Query(
                f"sum {w} (rate(sglang:generation_tokens_total{{{ENGINE}}}[$__rate_interval]))"
                f" / sum {w} (rate(sglang:spec_verify_calls_total{{{ENGINE}}}"
                "[$__rate_interval]))",
                f"from counters {LEGEND}",
            ),
            Query(f"max {w} (sglang:spec_accept_length{{{ENGINE}}})", f"engine {LEGEND}"),
            Query(f"qwen_npu_spec_accept_length{{{SIDECAR}}}", "sidecar {{pod}} {{instance}}"),
        ],
        threshold="specAcceptLengthMin",
        direction="below",
        alert="QwenNpuSpecAcceptanceCollapse",
    )
    b.timeseries(
        "Acceptance rate",
        "Accepted over proposed draft tokens: the engine's sglang:spec_accept_rate and the "
        "sidecar's windowed qwen_npu_spec_accept_rate.",
        "percentunit",
        [
            Query(f"max {w} (sglang:spec_accept_rate{{{ENGINE}}})", f"engine {LEGEND}"),
            Query(f"qwen_npu_spec_accept_rate{{{SIDECAR}}}", "sidecar {{pod}} {{instance}}"),
        ],
        min_val=0,
        max_val=1,
    )

    b.row("Output canary")
    b.timeseries(
        "Canary degeneration score",
        "0 = clean, 1 = fully repetitive or garbled (qwen_npu_canary_degeneration_score). Above "
        "the red line (thresholds.canaryDegenerationMax) QwenNpuCanaryDegenerated pages.",
        "percentunit",
        [Query(f"qwen_npu_canary_degeneration_score{{{SIDECAR}}}", "{{pod}} {{instance}}")],
        threshold="canaryDegenerationMax",
        alert="QwenNpuCanaryDegenerated",
        width=8,
        min_val=0,
        max_val=1,
    )
    b.timeseries(
        "Canary runs by result",
        "Canary generations per result (qwen_npu_canary_runs_total).",
        "short",
        [
            Query(
                "sum by (namespace, pod, instance, result) "
                f"(increase(qwen_npu_canary_runs_total{{{SIDECAR}}}[$__rate_interval]))",
                "{{result}} {{pod}} {{instance}}",
            )
        ],
        width=8,
    )
    b.timeseries(
        "Time since last good canary",
        "Seconds since the canary last came back clean "
        "(qwen_npu_canary_last_success_timestamp_seconds).",
        "s",
        [
            Query(
                f"time() - qwen_npu_canary_last_success_timestamp_seconds{{{SIDECAR}}}",
                "{{pod}} {{instance}}",
            )
        ],
        width=8,
    )
    return b
