"""The metrics other programs of a deployment export, that the dashboards and alerts read.

Neither the engine nor the sidecar exports these. Listed here so that every metric a dashboard or
alert uses is declared somewhere (a renamed one breaks a test, not a dashboard), and so that the
end-to-end test's fixture exporter serves the same shape:

- ``NPU_EXPORTER_METRICS``: MindCluster's ``npu-exporter`` DaemonSet, one series per chip with the
  labels below (pod, namespace and container are filled when the chip is allocated to a
  container);
- ``ROUTER_METRICS``: the router (sglang-router, ``smg``) on its ``--prometheus-port`` (names
  ``smg_*``), with the labels the pinned router puts on them (seen on its /metrics by
  ``make failover``).
"""

from __future__ import annotations

from qwen_npu.metrics.spec import MetricSpec

CHIP_LABELS: tuple[str, ...] = ("id", "model_name", "namespace", "pod_name", "container_name")

NPU_EXPORTER_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "npu_chip_info_utilization",
        "gauge",
        "AI core utilization of the chip (percent).",
        CHIP_LABELS,
        unit="percent",
    ),
    MetricSpec(
        "npu_chip_info_hbm_used_memory",
        "gauge",
        "HBM used on the chip (MB).",
        CHIP_LABELS,
        unit="mbytes",
    ),
    MetricSpec(
        "npu_chip_info_hbm_total_memory",
        "gauge",
        "HBM total on the chip (MB).",
        CHIP_LABELS,
        unit="mbytes",
    ),
    MetricSpec(
        "npu_chip_info_temperature",
        "gauge",
        "Chip temperature (Celsius).",
        CHIP_LABELS,
        unit="celsius",
    ),
    MetricSpec("npu_chip_info_power", "gauge", "Chip power (W).", CHIP_LABELS, unit="watt"),
    MetricSpec(
        "npu_chip_info_health_status",
        "gauge",
        "Chip health: 1 = healthy, 0 = unhealthy.",
        CHIP_LABELS,
    ),
)

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
