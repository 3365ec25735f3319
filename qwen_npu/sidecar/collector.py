"""``/metrics``' content: one collector that reads the trackers at scrape time.

The numbers live in the trackers that produce them; each scrape builds the families ``CATALOGUE``
declares from their current values, so an exported number is never a stale copy. Only the two
latency histograms are prometheus_client objects (an observation has nowhere else to go).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from qwen_npu import __version__
from qwen_npu.metrics.catalogue import (
    BY_NAME,
    CATALOGUE,
    GDN_VERDICTS,
    PATCH_STATES,
    PREFIX,
    UB_SOURCES,
)
from qwen_npu.sidecar.monitor import Monitor

Sample = tuple[Sequence[str], float]  # label values in the spec's order, value


def _family(name: str, samples: Iterable[Sample]) -> Metric:
    spec = BY_NAME[name]
    kind = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
    family = kind(spec.name, spec.help, labels=spec.labels)
    for labels, value in samples:
        family.add_metric(list(labels), value)
    return family


def _info(name: str, values: dict[str, str]) -> Metric:
    spec = BY_NAME[name]
    family = InfoMetricFamily(spec.name.removesuffix("_info"), spec.help)
    family.add_metric([], values)
    return family


def _one(value: float | bool) -> list[Sample]:
    return [((), float(value))]


def _states(current: dict[str, str], states: Sequence[str]) -> list[Sample]:
    """1 for each key's current state, 0 for its other states (patch states, GDN verdicts)."""
    return [((key, s), float(s == now)) for key, now in current.items() for s in states]


class SidecarCollector(Collector):
    """Builds every ``CATALOGUE`` family from the monitor's trackers, in catalogue order."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[Metric]:
        m = self.monitor
        now = m.clock()
        h, info, canary = m.health, m.info, m.canary
        scored = canary.scored
        ub = {"engine": info.ub_engine(), "predicted": m.ub_predicted}
        gauges: dict[str, list[Sample]] = {
            "engine_up": _one(h.up()),
            "engine_ready": _one(h.ready()),
            "engine_draining": _one(h.draining),
            "engine_consecutive_failures": _one(h.consecutive_failures),
            "engine_startup_elapsed_seconds": _one(h.startup_elapsed(now)),
            "startup_budget_seconds": _one(m.settings.startup_budget_s),
            "engine_uptime_seconds": _one(h.uptime(now)),
            "engine_restarts_total": _one(h.restarts),
            "engine_errors_total": [((k,), float(n)) for k, n in m.errors.counts.items()],
            "patch_state": _states(info.patch_states(), PATCH_STATES),
            "patch_used_by_mode": [((n,), v) for n, v in info.patch_used().items()],
            "gdn_contract": _states(info.gdn_verdicts(), GDN_VERDICTS),
            "ub_plan_known": [((s,), float(ub[s].known)) for s in UB_SOURCES],
            "ub_budget_bytes": [((s,), ub[s].ub_bytes) for s in UB_SOURCES],
            "ub_head_block_size": [((s,), ub[s].h_block_size) for s in UB_SOURCES],
            "ub_tile_bytes": [((s,), ub[s].tile_bytes) for s in UB_SOURCES],
            "ub_buffered_bytes": [((s,), ub[s].buffered_bytes) for s in UB_SOURCES],
            "ub_headroom_bytes": [((s,), ub[s].headroom_bytes) for s in UB_SOURCES],
            "ub_plane_overflow": [((s,), ub[s].plane_overflow) for s in UB_SOURCES],
            "ub_plan_mismatch": _one(info.ub_mismatch(m.ub_predicted)),
            "spec_enabled": _one(info.spec_enabled()),
            "spec_num_steps": _one(info.spec_number("speculative_num_steps")),
            "spec_num_draft_tokens": _one(info.spec_number("speculative_num_draft_tokens")),
            "canary_runs_total": [((r,), float(n)) for r, n in canary.runs.items()],
            "canary_degeneration_score": _one(
                math.nan if scored is None else scored.degeneration_score
            ),
            "canary_longest_repeat_tokens": _one(
                math.nan if scored is None else scored.longest_repeat_tokens
            ),
            "canary_golden_prefix_ratio": _one(
                math.nan
                if scored is None or scored.golden_prefix_ratio is None
                else scored.golden_prefix_ratio
            ),
            "canary_last_success_timestamp_seconds": _one(canary.last_success_ts),
        }
        infos = {
            "build_info": {
                "qwen_npu_version": __version__,
                "sglang_version": info.sglang_version(),
            },
            "spec_info": {"algorithm": info.spec_algorithm()},
        }
        histograms = {
            "engine_health_probe_seconds": m.probe.latency,
            "canary_latency_seconds": canary.latency,
        }
        for spec in CATALOGUE:
            short = spec.name.removeprefix(PREFIX)
            if short in histograms:
                yield from histograms[short].collect()
            elif short in infos:
                yield _info(spec.name, infos[short])
            else:
                yield _family(spec.name, gauges[short])


def registry_for(monitor: Monitor) -> CollectorRegistry:
    """A private registry with only the sidecar's collector (no process or platform metrics)."""
    registry = CollectorRegistry()
    registry.register(SidecarCollector(monitor))
    return registry
