"""Alerts on the NPU exporter's chip metrics, for the chips of the release's pods.

The selector (config ``npu_selector``) keeps the chips allocated to pods in the release's namespace;
the exporter's own ``namespace`` label survives the scrape only with ``honor_labels: true``.
"""

from __future__ import annotations

from qwen_npu.observability.rules import Alert, AlertGroup

CHIP_UNHEALTHY = Alert(
    name="QwenNpuChipUnhealthy",
    severity="critical",
    for_="2m",
    summary="An NPU chip serving the engine reports unhealthy.",
    description=(
        "NPU chip {{ $labels.id }} ({{ $labels.model_name }}) of pod {{ $labels.pod_name }}"
        " reports health status {{ $value }} (1 = healthy) for 2 minutes."
    ),
    expr="npu_chip_info_health_status{%(npu)s} != 1",
)

HBM_NEAR_FULL = Alert(
    name="QwenNpuHbmNearFull",
    severity="warning",
    for_="10m",
    summary="An NPU chip's HBM is nearly full.",
    description=(
        "NPU chip {{ $labels.id }} of pod {{ $labels.pod_name }} uses"
        " {{ $value | humanizePercentage }} of its HBM (maximum %(hbmUsedRatioMax)s)."
    ),
    expr=(
        "npu_chip_info_hbm_used_memory{%(npu)s} / npu_chip_info_hbm_total_memory{%(npu)s}"
        " > %(hbmUsedRatioMax)s"
    ),
    needs=("hbmUsedRatioMax",),
)

GROUP = AlertGroup("qwen-npu.npu", (CHIP_UNHEALTHY, HBM_NEAR_FULL))
