"""The metric lists, the bottom floor: every metric name the project exports or reads.

``catalogue`` (the sidecar's ``qwen_npu_*``), ``sglang`` (SGLang's ``sglang:*``), ``external``
(the router's ``smg_*``, Ascend's NPU exporter's ``npu_chip_info_*``), all declared with
``spec.MetricSpec``. The sidecar, the simulator, the dashboards and the alerts read them; this
package imports nothing above it.
"""
