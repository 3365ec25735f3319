"""The monitor: builds the trackers and the three steps, and runs them as loops; caches it all.

Why this exists: the kubelet's probes and Prometheus' scrapes must be answered in milliseconds from
cached state, also while the engine hangs. The monitor wires the parts together and owns their
lifetime (``start``/``stop`` from the app's ``lifespan``); each part is its own module:

- ``loops``: the scheduling (a step, then one interval of sleep; a failing step is logged);
- ``probe``, ``info``, ``canary_runner``: the health, info and canary steps, each bounded (one
  exchange at a time, a deadline per exchange, a byte limit per response);
- ``errors``: the error accounting every step shares;
- ``publish``: copying the numbers into ``SidecarStats`` and the collector after each step;
- ``status_view``: the ``/status`` document.

Time is injected (``clock``, ``wall`` and the loops' ``sleep``), so tests drive it all without
waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
from prometheus_client import CollectorRegistry

from qwen_npu import __version__
from qwen_npu.serve.catalogue import SidecarMetricsCollector, SidecarStats
from qwen_npu.serve.sidecar import ub
from qwen_npu.serve.sidecar.canary_runner import CanaryRunner
from qwen_npu.serve.sidecar.config import Settings
from qwen_npu.serve.sidecar.engine import EngineClient
from qwen_npu.serve.sidecar.errors import ErrorAccounting
from qwen_npu.serve.sidecar.health import HealthTracker
from qwen_npu.serve.sidecar.info import InfoReader
from qwen_npu.serve.sidecar.logs import RateLimiter, log
from qwen_npu.serve.sidecar.loops import Loop, Loops, Sleep
from qwen_npu.serve.sidecar.probe import HealthProbe
from qwen_npu.serve.sidecar.publish import Publisher
from qwen_npu.serve.sidecar.spec_window import SpecWindow


class Monitor:
    """Owns the engine client, the trackers, the registry, the three steps and their loops."""

    def __init__(
        self,
        settings: Settings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self._transport = transport
        self.clock = clock
        self.registry = CollectorRegistry()
        self.health = HealthTracker(
            startup_budget_s=settings.startup_budget_s,
            liveness_failures=settings.liveness_failures,
            now=clock(),
        )
        self.spec = SpecWindow(settings.spec_window_s)
        self.stats = SidecarStats(
            startup_budget_s=settings.startup_budget_s,
            spec_window_s=settings.spec_window_s,
            qwen_npu_version=__version__,
        )
        predicted = ub.predict(settings.model_dir, settings.tp_size, settings.mamba_ssm_dtype)
        self.predicted_plan, self.predicted_error = predicted.plan, predicted.error
        self.stats.ub["predicted"] = ub.stats_from_plan(predicted.plan)
        self.client: EngineClient | None = None
        self._loop_errors = RateLimiter(60.0)
        self.loops = Loops(sleep=sleep)

        self.publisher = Publisher(
            self.stats, SidecarMetricsCollector(self.registry), self.health, clock
        )
        errors = ErrorAccounting(self.stats.errors, RateLimiter(60.0))
        self.probe = HealthProbe(
            engine=self._engine,
            engine_url=settings.engine_url,
            timeout_s=settings.health_timeout_s,
            health=self.health,
            spec=self.spec,
            errors=errors,
            publisher=self.publisher,
            clock=clock,
        )
        self.info = InfoReader(
            settings=settings,
            engine=self._engine,
            health=self.health,
            spec=self.spec,
            stats=self.stats,
            errors=errors,
            clock=clock,
        )
        self.canary = CanaryRunner(
            settings=settings,
            engine=self._engine,
            health=self.health,
            stats=self.stats,
            errors=errors,
            publisher=self.publisher,
            clock=clock,
            wall=wall,
        )
        self.publisher.publish()

    # What the routes read.
    @property
    def version(self) -> int:
        """Goes up whenever an exported number changes (the /metrics cache key)."""
        return self.publisher.version

    def refresh_time(self) -> None:
        """Bring the clock-driven gauges up to now (called on every /metrics render)."""
        self.publisher.refresh_time()

    # Lifecycle (called from the app's lifespan).
    def loop_plan(self) -> list[Loop]:
        """The loops ``start`` runs: health and info at once, the canary after one interval."""
        s = self.settings
        loops = [
            Loop("health", s.poll_interval_s, self.probe),
            Loop("info", s.info_interval_s, self.info),
        ]
        if s.canary_enabled:
            loops.append(Loop("canary", s.canary_interval_s, self.canary, wait_first=True))
        return loops

    async def start(self) -> None:
        self.client = EngineClient(
            self.settings.engine_url,
            max_bytes=self.settings.max_response_bytes,
            api_key=self.settings.api_key(),
            transport=self._transport,
        )
        if self.predicted_error and self.settings.model_dir is not None:
            log(
                "warning",
                "ub_prediction_unavailable",
                error=self.predicted_error,
                action="fix QWEN_NPU_MODEL_DIR or QWEN_NPU_TP_SIZE; predicted plan stays unknown",
            )
        self.loops.start(
            self.loop_plan(), after_step=self.publisher.publish, errors_log=self._loop_errors
        )

    async def stop(self) -> None:
        await self.loops.stop()
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    def _engine(self) -> EngineClient:
        if self.client is None:
            raise RuntimeError("monitor not started")
        return self.client
