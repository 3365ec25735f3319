"""``histogram(name)``: a latency histogram declared in the sidecar's catalogue.

Why it lives here: the trackers that observe a latency (the health probe, the canary) and the
collector that exports it all need the same declaration (name, help, buckets); built from the
catalogue in the metrics floor, none of them imports another to get it. Unregistered: the
sidecar's collector exports it at scrape time.
"""

from __future__ import annotations

from prometheus_client import Histogram

from qwen_npu.metrics.catalogue import BY_NAME, PREFIX


def histogram(name: str) -> Histogram:
    """The unregistered histogram ``qwen_npu_<name>`` of ``CATALOGUE``."""
    spec = BY_NAME[PREFIX + name]
    if spec.kind != "histogram":
        raise ValueError(
            f"{spec.name} is a {spec.kind} in qwen_npu/metrics/catalogue.py, not a histogram"
        )
    return Histogram(spec.name, spec.exposed_help, buckets=spec.buckets, registry=None)
