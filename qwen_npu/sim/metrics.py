"""The simulator's ``/metrics``: SGLang's ``sglang:*`` series, declared from the one metric list.

Every metric is built from ``qwen_npu.metrics.sglang.SGLANG_METRICS`` (names, types, labels,
buckets), so the simulator cannot export a name the dashboards do not know. Label sets are bound
once (one ``observe`` per event on the hot path); the engine's gauges are copied in at scrape time.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import HistogramMetricFamily
from prometheus_client.registry import Collector

from qwen_npu.metrics.sglang import SGLANG_METRICS


class FastHistogram(Collector):
    """A histogram for the per-chunk hot path: one bisect and two adds per observation.

    prometheus-client's Histogram takes a lock and walks its buckets on every ``observe``; at
    20k+ chunks/s that is a visible share of the one core, so the inter-token latency histogram
    (observed once per streamed chunk) keeps plain counts and renders them at scrape time.
    """

    def __init__(self, name: str, help_: str, labels: dict[str, str], buckets: tuple[float, ...]):
        self.name = name
        self.help = help_
        self.labels = labels
        self.bounds = list(buckets)
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def collect(self) -> Iterator[HistogramMetricFamily]:
        fam = HistogramMetricFamily(self.name, self.help, labels=list(self.labels))
        cumulative, total = [], 0
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            total += count
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            cumulative.append((le, float(total)))
        fam.add_metric(list(self.labels.values()), cumulative, self.sum)
        yield fam


class SimMetrics:
    """prometheus-client objects for every SGLang metric, with the label values bound once."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        base = {"model_name": model_name, "engine_type": "unified"}
        values = {**base, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        self._children: dict[tuple[str, str], Any] = {}
        self._gauges: dict[str, Any] = {}
        for spec in SGLANG_METRICS:
            short = spec.name.removeprefix("sglang:")
            labels = list(spec.labels)
            if spec.name == "sglang:inter_token_latency_seconds":
                vals = {k: values[k] for k in labels}
                fast = FastHistogram(spec.name, spec.help, vals, spec.buckets)
                self.registry.register(fast)
                self._children[(short, "")] = fast
                continue
            extra = {"buckets": spec.buckets} if spec.kind == "histogram" else {}
            kind = {"gauge": Gauge, "counter": Counter, "histogram": Histogram}[spec.kind]
            metric = kind(spec.name, spec.help, labels, registry=self.registry, **extra)
            if "is_streaming" in labels:
                for flag in ("true", "false"):
                    vals = {k: (flag if k == "is_streaming" else values[k]) for k in labels}
                    self._children[(short, flag)] = metric.labels(**vals)
            else:
                child = metric.labels(**{k: values[k] for k in labels})
                self._children[(short, "")] = child
                if spec.kind == "gauge":
                    self._gauges[short] = child
        c = self._children
        # Hot-path handles.
        self.itl = c[("inter_token_latency_seconds", "")]
        self.queue_time = c[("queue_time_seconds", "")]
        self.spec_verify = c[("spec_verify_calls_total", "")]
        self.aborted = c[("num_aborted_requests_total", "")]

    def child(self, short: str, streaming: bool | None = None) -> Any:
        flag = "" if streaming is None else ("true" if streaming else "false")
        return self._children[(short, flag)]

    def render(self, gauges: dict[str, float]) -> bytes:
        """The exposition text, after copying the current gauge values (short name -> value)."""
        for name, child in self._gauges.items():
            child.set(gauges[name])
        return generate_latest(self.registry)


MALFORMED_EXPOSITION = (
    b"# HELP sglang:num_running_reqs The number of running requests.\n"
    b"# TYPE sglang:num_running_reqs gauge\n"
    b'sglang:num_running_reqs{model_name="sim" 3\n'
    b"sglang:num_queue_reqs not-a-number\n"
    b"this line is not exposition format\n"
)
