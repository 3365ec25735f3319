"""The metrics other programs of a deployment export, that the dashboards and alerts read: declared
so a renamed one breaks a test, not a dashboard, and so the end-to-end test's fixture exporter
serves the same shape. ``NPU_EXPORTER_METRICS``: MindCluster's ``npu-exporter``, one series per
chip (pod, namespace and container filled when the chip is allocated); ``ROUTER_METRICS``: the
router (``smg_*``) with the labels the pinned router puts on them (seen by ``make failover``).
"""

from __future__ import annotations

from qwen_npu.metrics.spec import MetricSpec

CHIP_LABELS: tuple[str, ...] = ("id", "model_name", "namespace", "pod_name", "container_name")


def _chip(name: str, help_: str, unit: str = "") -> MetricSpec:
    return MetricSpec(f"npu_chip_info_{name}", "gauge", help_, CHIP_LABELS, unit=unit)


NPU_EXPORTER_METRICS: tuple[MetricSpec, ...] = (
    _chip("utilization", "AI core utilization of the chip (percent).", "percent"),
    _chip("hbm_used_memory", "HBM used on the chip (MB).", "mbytes"),
    _chip("hbm_total_memory", "HBM total on the chip (MB).", "mbytes"),
    _chip("temperature", "Chip temperature (Celsius).", "celsius"),
    _chip("power", "Chip power (W).", "watt"),
    _chip("health_status", "Chip health: 1 = healthy, 0 = unhealthy."),
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
