"""The "Qwen NPU / Serving" dashboard: what users feel, per engine instance and model (traffic,
latency, load, speculative decoding, the canary, the router)."""

from __future__ import annotations

from qwen_npu.observability.alerts import SPEC_ACCEPT_LENGTH, SPEC_ACCEPT_RATE
from qwen_npu.observability.config import DEFAULT, Config
from qwen_npu.observability.panels import Board, Query, query_variable

FILENAME = "qwen-npu-serving.json"
TITLE = "Qwen NPU / Serving"

ENGINE = 'namespace=~"$namespace", pod=~"$pod", model_name=~"$model_name"'
SIDECAR = 'namespace=~"$namespace", pod=~"$pod"'
ROUTER = 'namespace=~"$namespace"'  # the router's own pod is not an engine pod
BY = "namespace, pod, instance, model_name"
LEGEND = "{{pod}} {{instance}} {{model_name}}"


def _rate(metric: str) -> str:
    return f"sum by ({BY}) (rate({metric}{{{ENGINE}}}[$__rate_interval]))"


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
        query_variable(
            "namespace", "Namespace", "label_values(sglang:num_running_reqs, namespace)"
        ),
        query_variable(
            "pod",
            "Engine pod",
            'label_values(sglang:num_running_reqs{namespace=~"$namespace"}, pod)',
        ),
        query_variable(
            "model_name",
            "Model",
            'label_values(sglang:num_running_reqs{namespace=~"$namespace", pod=~"$pod"}, '
            "model_name)",
        ),
    )

    def top(metric: str, legend: str = "") -> Query:
        """The largest of an engine's ranks' ``metric``."""
        return Query(f"max {w} ({metric}{{{ENGINE}}})", f"{legend} {LEGEND}".lstrip())

    b.row("Traffic")
    b.timeseries(
        "Request rate",
        "Requests finished per second (sglang:num_requests_total), per engine and model.",
        "reqps",
        [Query(_rate("sglang:num_requests_total"), LEGEND)],
        width=8,
    )
    b.timeseries(
        "Aborted requests",
        "Share of requests the engine aborted (client disconnects, timeouts, errors): "
        "sglang:num_aborted_requests_total over sglang:num_requests_total.",
        "percentunit",
        [
            Query(
                f"{_rate('sglang:num_aborted_requests_total')} / "
                f"{_rate('sglang:num_requests_total')}",
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
            Query(_rate("sglang:prompt_tokens_total"), f"prompt {LEGEND}"),
            Query(_rate("sglang:generation_tokens_total"), f"generated {LEGEND}"),
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
        [top("sglang:num_queue_reqs")],
        threshold="queueDepth",
        alert="QwenNpuQueueGrowing",
        width=8,
    )
    b.timeseries(
        "Running requests",
        "Requests in the running batch (sglang:num_running_reqs).",
        "short",
        [top("sglang:num_running_reqs")],
        width=8,
    )
    b.timeseries(
        "KV and mamba cache usage",
        "Share of the KV token pool (sglang:token_usage) and of the mamba state pool "
        "(sglang:mamba_usage) in use.",
        "percentunit",
        [top("sglang:token_usage", "KV"), top("sglang:mamba_usage", "mamba")],
        width=8,
        min_val=0,
        max_val=1,
    )

    b.row("Speculative decoding (MTP)")
    b.timeseries(
        "Acceptance length",
        f"Tokens produced per verify step over 10 minutes ({SPEC_ACCEPT_LENGTH.record}, the "
        "recording rule QwenNpuSpecAcceptanceCollapse reads: generated tokens over "
        "sglang:spec_verify_calls_total), and the engine's own sglang:spec_accept_length (its "
        "last batch). Below the red line (thresholds.specAcceptLengthMin) MTP costs more than it "
        "gives.",
        "short",
        [
            Query(f"max by ({BY}) ({SPEC_ACCEPT_LENGTH.record}{{{ENGINE}}})", f"10m {LEGEND}"),
            top("sglang:spec_accept_length", "last batch"),
        ],
        threshold="specAcceptLengthMin",
        direction="below",
        alert="QwenNpuSpecAcceptanceCollapse",
    )
    b.timeseries(
        "Acceptance rate",
        f"Accepted over proposed draft tokens over 10 minutes ({SPEC_ACCEPT_RATE.record}, "
        "from the acceptance length and sglang:spec_num_draft_tokens), and the engine's own "
        "sglang:spec_accept_rate (its last batch).",
        "percentunit",
        [
            Query(f"max by ({BY}) ({SPEC_ACCEPT_RATE.record}{{{ENGINE}}})", f"10m {LEGEND}"),
            top("sglang:spec_accept_rate", "last batch"),
        ],
        min_val=0,
        max_val=1,
    )
    _mtp_payoff(b)

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

    b.row("Router")
    _worker_panel(
        b,
        "Router workers healthy",
        "The router's view of each worker (smg_worker_health): 1 = it sends to it, 0 = ejected "
        "after failing its health checks. Ejected for 2 minutes pages as "
        "QwenNpuRouterWorkerEjected. A replica drained by a rollout leaves the router's list "
        "instead (its readiness dropped first).",
        "smg_worker_health",
        max_val=1,
    )
    b.timeseries(
        "Router requests and retries",
        "Requests the router received (smg_router_requests_total), answered with a 5xx "
        "(smg_http_responses_total) and retried on another worker "
        "(smg_worker_retries_total), per second.",
        "reqps",
        [
            Query(f"sum by (namespace) (rate({metric}{{{selector}}}[$__rate_interval]))", legend)
            for metric, selector, legend in (
                ("smg_router_requests_total", ROUTER, "requests"),
                ("smg_http_responses_total", f'{ROUTER}, status_code=~"5.."', "errors"),
                ("smg_worker_retries_total", ROUTER, "retries"),
            )
        ],
        width=8,
        min_val=0,
    )
    _worker_panel(
        b,
        "Router circuit breakers",
        "Each worker's circuit breaker in the router (smg_worker_cb_state): 0 closed, above 0 "
        "open or half-open (it stopped sending after repeated request failures).",
        "smg_worker_cb_state",
    )
    return b


def _worker_panel(
    b: Board, title: str, description: str, metric: str, max_val: float | None = None
) -> None:
    """A per-worker gauge of the router, which QwenNpuRouterWorkerEjected watches."""
    query = Query(f"max by (namespace, worker) ({metric}{{{ROUTER}}})", "{{worker}}")
    b.timeseries(
        title,
        description,
        "short",
        [query],
        alert="QwenNpuRouterWorkerEjected",
        width=8,
        min_val=0,
        max_val=max_val,
    )


def _mtp_payoff(b: Board) -> None:
    """Is MTP paying off: a verify step keeps the accepted drafts plus one of what it checks, and
    costs more than a plain decode step (the more so the larger the batch)."""
    accepted = f"max by ({BY}) ({SPEC_ACCEPT_LENGTH.record}{{{ENGINE}}})"
    tpot = (
        f"{_rate('sglang:request_time_per_output_token_seconds_sum')} / "
        f"{_rate('sglang:request_time_per_output_token_seconds_count')}"
    )
    b.timeseries(
        "MTP: tokens kept vs checked per verify step",
        "Is MTP paying off, part 1. Kept: tokens produced per verify step over 10 minutes "
        f"({SPEC_ACCEPT_LENGTH.record}: accepted drafts + 1). Checked: tokens each request puts "
        "into a verify step (sglang:spec_num_draft_tokens). The gap is compute spent on rejected "
        "drafts. MTP pays while kept > (verify step time / decode step time without MTP); the "
        "runbook's QwenNpuSpecAcceptanceCollapse section gives the ratio for the calibrated "
        "profile, `make mtp-tune` measures it for your traffic. Red line: "
        "thresholds.specAcceptLengthMin.",
        "short",
        [
            Query(accepted, f"kept {LEGEND}"),
            Query(f"max by ({BY}) (sglang:spec_num_draft_tokens{{{ENGINE}}})", f"checked {LEGEND}"),
        ],
        threshold="specAcceptLengthMin",
        direction="below",
        alert="QwenNpuSpecAcceptanceCollapse",
        min_val=0,
    )
    b.timeseries(
        "MTP: verify step time",
        "Is MTP paying off, part 2. Verify step: mean time per output token "
        "(sglang:request_time_per_output_token_seconds) times tokens per verify step; per "
        "token: the mean TPOT itself. Compare the per-token line with the TPOT of MTP off at the "
        "same running batch (`make bench-compare`, `make mtp-tune`): when MTP's TPOT is not "
        "lower, `make mtp-off`. A verify step time that grows with Running requests while kept "
        "tokens stay flat is the batch turning compute bound.",
        "s",
        [
            Query(f"({tpot}) * ({accepted})", f"verify step {LEGEND}"),
            Query(tpot, f"per output token {LEGEND}"),
        ],
        min_val=0,
    )
