"""The router's (sglang-router, ``smg``) metrics that the dashboards and alerts read.

The router exports them on its ``--prometheus-port`` (names ``smg_*``); neither the engine nor the
sidecar does. Listed here, with the labels the pinned router puts on them (seen on its
/metrics by ``make failover``), so that every metric a dashboard or alert uses is declared
somewhere and a renamed one breaks a test, not a dashboard.
"""

from __future__ import annotations

from qwen_npu.metrics.spec import MetricSpec

ROUTER_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "smg_worker_health",
        "gauge",
        "1 while the router considers the worker healthy, 0 once its health checks failed "
        "--health-failure-threshold times in a row (it then sends it nothing).",
        ("worker",),
        unit="short",
    ),
    MetricSpec(
        "smg_worker_cb_state",
        "gauge",
        "The worker's circuit breaker: 0 closed (sending), otherwise open or half-open.",
        ("worker",),
        unit="short",
    ),
    MetricSpec(
        "smg_worker_retries_total",
        "counter",
        "Requests the router retried on another worker after a failure.",
        (),
        unit="short",
    ),
    MetricSpec(
        "smg_worker_cb_outcomes_total",
        "counter",
        "Request outcomes per worker as the circuit breaker counts them.",
        ("worker", "outcome"),
        unit="short",
    ),
    MetricSpec(
        "smg_router_requests_total",
        "counter",
        "Requests the router received.",
        ("router_type", "backend_type", "connection_mode", "model", "endpoint", "streaming"),
        unit="reqps",
    ),
    MetricSpec(
        "smg_http_responses_total",
        "counter",
        "Responses the router sent, by HTTP status code (5xx: the request failed).",
        ("status_code", "error_code"),
        unit="reqps",
    ),
)
