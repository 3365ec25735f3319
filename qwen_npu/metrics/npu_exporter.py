"""The Ascend NPU exporter's chip metrics that the dashboards and alerts read.

Neither the engine nor the sidecar exports these: MindCluster's ``npu-exporter`` DaemonSet does,
one series per chip with the labels below (pod, namespace and container are filled when the chip
is allocated to a container). Listed here so that every metric a dashboard or alert uses is
declared somewhere, and so that the end-to-end test's fixture exporter serves the same shape.
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
