"""Publishing: copy the trackers' numbers into ``SidecarStats`` and the collector (STYLE.md rule 9).

Why this exists: the steps keep plain numbers; only this module writes to prometheus_client. Its
``version`` goes up whenever an exported number changes, and ``/metrics`` re-renders only then (or
when its cached page is a second old), so a burst of scrapes costs no rendering.
"""

from __future__ import annotations

from collections.abc import Callable

from qwen_npu.serve.catalogue import SidecarMetricsCollector, SidecarStats
from qwen_npu.serve.sidecar.health import HealthTracker


class Publisher:
    """Owns the exported stats and the collector; ``version`` is the /metrics cache key."""

    def __init__(
        self,
        stats: SidecarStats,
        collector: SidecarMetricsCollector,
        health: HealthTracker,
        clock: Callable[[], float],
    ) -> None:
        self.stats = stats
        self.collector = collector
        self.health = health
        self.clock = clock
        self.version = 0

    def changed(self) -> None:
        """Something exported changed outside ``publish`` (a histogram observation)."""
        self.version += 1

    def observe(self, name: str, seconds: float) -> None:
        """One observation of a latency histogram (health probe or canary)."""
        self.collector.observe(name, seconds)
        self.changed()

    def refresh_time(self) -> None:
        """Bring the clock-driven gauges up to now (called on every /metrics render)."""
        now = self.clock()
        self.stats.startup_elapsed_s = self.health.startup_elapsed(now)
        self.stats.uptime_s = self.health.uptime(now)
        self.collector.log_time(self.stats)

    def publish(self) -> None:
        """Copy the health tracker into the stats, and the stats into the collector."""
        now = self.clock()
        h, st = self.health, self.stats
        st.engine_up = h.up()
        st.engine_ready = h.ready()
        st.engine_draining = h.draining
        st.consecutive_failures = h.consecutive_failures
        st.startup_elapsed_s = h.startup_elapsed(now)
        st.uptime_s = h.uptime(now)
        st.restarts = h.restarts
        self.collector.log_stats(st)
        self.changed()
