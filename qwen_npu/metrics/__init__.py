"""The metric lists, the bottom floor: every metric name the project exports or reads.

``catalogue`` (the sidecar's ``qwen_npu_*``), ``sglang`` (SGLang's ``sglang:*``), ``router`` (the
router's ``smg_*``), ``npu_exporter`` (Ascend's NPU exporter), all declared with
``spec.MetricSpec``. The sidecar, the simulator, the dashboards and the alerts read them; this
package imports nothing above it.
"""
