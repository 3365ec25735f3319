"""The background poller: probes the engine, reads the state file, runs the canary; caches it all.

Why this exists: the kubelet's probes and Prometheus' scrapes must be answered in milliseconds from
cached state, also while the engine hangs. Three independent loops (health, info, canary) run from
the app's ``lifespan`` and each one is bounded: one exchange at a time, a deadline per exchange, a
byte limit per response, and any exception is caught, counted and logged, never fatal. After each
step the loop copies its numbers into ``SidecarStats`` and the collector (STYLE.md rule 9).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from qwen_npu import __version__
from qwen_npu.patches.state import STATE_FILE, read_state
from qwen_npu.serve.catalogue import (
    PATCH_NAMES,
    PATCH_STATES,
    SidecarMetricsCollector,
    SidecarStats,
)
from qwen_npu.serve.sidecar import canary, ub
from qwen_npu.serve.sidecar.config import Settings
from qwen_npu.serve.sidecar.engine import EngineClient, EngineError
from qwen_npu.serve.sidecar.health import HealthTracker, Outcome, classify
from qwen_npu.serve.sidecar.logs import RateLimiter, log
from qwen_npu.serve.sidecar.spec_window import (
    MetricsFormatError,
    SpecCounters,
    SpecWindow,
    parse_spec_counters,
)

HEALTH_PATH = "/health_generate"
_SPEC_OFF = (None, "", "none", "NONE")

#: What to do next, per health transition (the ``action`` of its log line).
_ACTIONS: dict[str, tuple[str, str]] = {
    "engine_ready": ("info", "none"),
    "engine_unreachable": ("warning", "check the engine container: kubectl logs -c engine"),
    "engine_start_ended": (
        "warning",
        "the engine process went away; kubectl describe pod for the exit reason and restarts",
    ),
    "engine_reachable": ("info", "none"),
    "engine_draining": (
        "warning",
        "expected during rollout or shutdown; otherwise check engine log",
    ),
    "engine_stuck_or_dead": (
        "error",
        "liveness fails now, the kubelet restarts the engine; save its log (docs/runbook.md)",
    ),
}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


class Monitor:
    """Owns the engine client, the trackers, the registry and the three loops."""

    def __init__(
        self,
        settings: Settings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._transport = transport
        self.clock = clock
        self.wall = wall
        self.registry = CollectorRegistry()
        self.collector = SidecarMetricsCollector(self.registry)
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
        self.client: EngineClient | None = None
        self.server_info: dict[str, Any] = {}
        self.state: dict[str, Any] | None = None
        self.state_checked = False
        predicted = ub.predict(settings.model_dir, settings.tp_size, settings.mamba_ssm_dtype)
        self.predicted_plan, self.predicted_error = predicted.plan, predicted.error
        self.stats.ub["predicted"] = ub.stats_from_plan(predicted.plan)
        self.canary_last: dict[str, Any] = {}
        self.golden = settings.golden_text()
        self._errors_log = RateLimiter(60.0)
        self._tasks: list[asyncio.Task[None]] = []
        self._canary_lock = asyncio.Lock()
        self.version = 0  # bumped whenever an exported number changes (the /metrics cache key)
        self.publish()

    # Lifecycle (called from the app's lifespan).
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
        s = self.settings
        loops: list[tuple[str, float, Callable[[], Awaitable[None]]]] = [
            ("health", s.poll_interval_s, self.probe_health),
            ("info", s.info_interval_s, self.poll_info),
        ]
        if s.canary_enabled:
            loops.append(("canary", s.canary_interval_s, self.run_canary))
        self._tasks = [
            asyncio.create_task(self._loop(name, every, body), name=f"sidecar-{name}")
            for name, every, body in loops
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    async def _loop(self, name: str, every: float, body: Callable[[], Awaitable[None]]) -> None:
        first = name == "canary"  # the canary waits one interval; the others start at once
        while True:
            if first:
                await asyncio.sleep(every)
            first = True
            try:
                await body()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must not stop the loop that feeds the probes
                if self._errors_log.allow(f"internal-{name}"):
                    log(
                        "error",
                        "poller_step_failed",
                        loop=name,
                        error=repr(exc),
                        action="report this line; the loop keeps running",
                    )
            self.publish()
            await asyncio.sleep(every)

    # Error accounting.
    def _count(self, exc: EngineError, where: str) -> None:
        if exc.kind == "connect" and where != HEALTH_PATH:
            return  # reachability is the health loop's to count: once per lost engine start
        self.stats.errors[exc.kind] = self.stats.errors.get(exc.kind, 0) + 1
        if self._errors_log.allow(f"{exc.kind}-{where}"):
            log(
                "warning",
                "engine_error",
                kind=exc.kind,
                where=where,
                detail=exc.detail,
                action="counted in qwen_npu_engine_errors_total; logged once a minute",
            )

    def _engine(self) -> EngineClient:
        if self.client is None:
            raise RuntimeError("monitor not started")
        return self.client

    # Loop bodies.
    async def probe_health(self) -> None:
        started_before = self.health.started
        status: int | None = None
        outcome: Outcome
        t0 = self.clock()
        try:
            response = await self._engine().request(
                "GET", HEALTH_PATH, timeout=self.settings.health_timeout_s
            )
            status = response.status
            outcome = classify(status, response.seconds)
            if outcome in ("http_error", "unhealthy"):
                detail = f"HTTP {status} after {response.seconds:.1f}s"
                self._count(EngineError("status", detail, status), HEALTH_PATH)
        except EngineError as exc:
            if exc.kind == "connect":
                outcome = "refused"
                if started_before:
                    self._count(exc, HEALTH_PATH)
            elif exc.kind == "timeout":
                outcome = "timeout"
                self._count(exc, HEALTH_PATH)
            else:
                outcome = "http_error"
                self._count(exc, HEALTH_PATH)
        now = self.clock()
        self.collector.observe("engine_health_probe_seconds", now - t0)
        self.version += 1
        for event in self.health.record(outcome, now, status):
            level, action = _ACTIONS.get(event, ("info", "none"))
            if event == "engine_unreachable" and not self.health.ever_ready:
                level, action = "info", "none: the engine opens its port when the model is loaded"
            log(
                level,
                event,
                engine_url=self.settings.engine_url,
                outcome=outcome,
                status=status,
                restarts=self.health.restarts,
                action=action,
            )
            if event == "engine_start_ended":
                self.spec.clear()

    async def poll_info(self) -> None:
        await self._read_state_file()
        if self.health.last_outcome in (None, "refused"):
            return
        await self._read_server_info()
        await self._read_engine_metrics()

    async def _read_state_file(self) -> None:
        directory = self.settings.state_dir
        state = await asyncio.to_thread(read_state, directory) if directory else None
        if state is None and self.state is not None and self._errors_log.allow("state"):
            log(
                "warning",
                "state_file_unreadable",
                file=str(directory and directory / STATE_FILE),
                action="patch states and the engine UB plan are reported as unknown",
            )
        self.state, self.state_checked = state, True
        patches = state.get("patches") if state else None
        states = dict.fromkeys(PATCH_NAMES, "unknown")
        if isinstance(patches, dict):
            for name, entry in patches.items():
                value = entry.get("state") if isinstance(entry, dict) else None
                states[str(name)] = value if value in PATCH_STATES else "unknown"
        self.stats.patch_states = states
        self.stats.ub["engine"] = ub.stats_from_plan(state.get("ub_plan") if state else None)
        self.stats.ub_mismatch = ub.mismatch(self.stats.ub["engine"], self.stats.ub["predicted"])
        version = state.get("sglang_version") if state else None
        if isinstance(version, str) and version:
            self.stats.sglang_version = version

    async def _read_server_info(self) -> None:
        path = "/server_info"
        try:
            response = await self._engine().request(
                "GET", path, timeout=self.settings.request_timeout_s
            )
            if response.status != 200:
                raise EngineError("status", f"HTTP {response.status}", response.status)
            info = response.json_object()
        except EngineError as exc:
            self._count(exc, path)
            return
        algorithm = info.get("speculative_algorithm")
        enabled = algorithm not in _SPEC_OFF
        self.stats.spec_enabled = enabled
        self.stats.spec_algorithm = str(algorithm) if enabled else "none"
        self.stats.spec_num_steps = _as_float(info.get("speculative_num_steps")) if enabled else 0.0
        self.stats.spec_num_draft_tokens = (
            _as_float(info.get("speculative_num_draft_tokens")) if enabled else 0.0
        )
        version = info.get("version")
        if isinstance(version, str) and version and self.stats.sglang_version == "unknown":
            self.stats.sglang_version = version[:64]
        states = info.get("internal_states")
        lifetime = None
        if isinstance(states, list) and states and isinstance(states[0], dict):
            lifetime = states[0].get("avg_spec_accept_length")
        self.server_info = {
            "speculative_algorithm": self.stats.spec_algorithm,
            "speculative_num_steps": _finite(self.stats.spec_num_steps),
            "speculative_num_draft_tokens": _finite(self.stats.spec_num_draft_tokens),
            "version": version if isinstance(version, str) else None,
            "avg_spec_accept_length_lifetime": (
                lifetime if isinstance(lifetime, int | float) else None
            ),
        }

    async def _read_engine_metrics(self) -> None:
        path = "/metrics"
        try:
            response = await self._engine().request(
                "GET", path, timeout=self.settings.request_timeout_s
            )
            if response.status != 200:
                raise EngineError("status", f"HTTP {response.status}", response.status)
            text = response.text()
            try:
                counters = await asyncio.to_thread(parse_spec_counters, text)
            except MetricsFormatError as exc:
                raise EngineError("malformed", f"not Prometheus text ({exc})") from None
        except EngineError as exc:
            self._count(exc, path)
            return
        # An engine that has not verified yet may export neither counter: that is zero, so the
        # window starts now rather than at the first scrape after the first finished request.
        self.spec.add(self.clock(), counters or SpecCounters(0.0, 0.0))
        self.stats.spec_accept_length = self.spec.accept_length()
        self.stats.spec_accept_rate = self.spec.accept_rate(self.stats.spec_num_draft_tokens)

    async def run_canary(self) -> None:
        if not self.health.ready() or self._canary_lock.locked():
            return
        async with self._canary_lock:
            await self._canary_once()

    async def _canary_once(self) -> None:
        s = self.settings
        body = {
            "text": s.canary_prompt,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": s.canary_max_tokens},
        }
        path = "/generate"
        t0 = self.clock()
        try:
            response = await self._engine().request(
                "POST", path, timeout=s.canary_timeout_s, json_body=body
            )
            if response.status != 200:
                raise EngineError("status", f"HTTP {response.status}", response.status)
            data = response.json_object()
            text = data.get("text")
            if not isinstance(text, str):
                raise EngineError("malformed", "/generate answer has no string 'text'")
        except EngineError as exc:
            self._count(exc, path)
            self.stats.canary_runs["error"] += 1
            self.canary_last = {"result": "error", "error": str(exc), "at": self.wall()}
            return
        latency = self.clock() - t0
        self.collector.observe("canary_latency_seconds", latency)
        self.version += 1
        result_score = canary.score(text.strip(), self.golden)
        result = result_score.result(s.canary_degeneration_max, s.canary_golden_min_ratio)
        self.stats.canary_runs[result] += 1
        self.stats.canary_degeneration_score = result_score.degeneration_score
        self.stats.canary_longest_repeat_tokens = float(result_score.longest_repeat_tokens)
        ratio = result_score.golden_prefix_ratio
        self.stats.canary_golden_prefix_ratio = math.nan if ratio is None else ratio
        if result == "ok":
            self.stats.canary_last_success_ts = self.wall()
        elif self._errors_log.allow(f"canary-{result}"):
            log(
                "warning",
                "canary_" + result,
                score=round(result_score.degeneration_score, 3),
                longest_repeat=result_score.longest_repeat_tokens,
                golden_prefix_ratio=ratio,
                output=text[:200],
                action="see docs/runbook.md#qwennpucanarydegenerated; "
                "if MTP is on, compare with make mtp-off",
            )
        self.canary_last = {
            "result": result,
            "at": self.wall(),
            "latency_s": round(latency, 4),
            "tokens": result_score.tokens,
            "degeneration_score": round(result_score.degeneration_score, 4),
            "longest_repeat_tokens": result_score.longest_repeat_tokens,
            "golden_prefix_ratio": ratio,
            "golden_prefix_chars": result_score.golden_prefix_chars,
            "output_head": text[:200],
        }

    # Publishing.
    def refresh_time(self) -> None:
        """Bring the clock-driven gauges up to now (called on every /metrics scrape)."""
        now = self.clock()
        self.stats.startup_elapsed_s = self.health.startup_elapsed(now)
        self.stats.uptime_s = self.health.uptime(now)
        self.collector.log_time(self.stats)

    def publish(self) -> None:
        now = self.clock()
        h = self.health
        self.stats.engine_up = h.up()
        self.stats.engine_ready = h.ready()
        self.stats.engine_draining = h.draining
        self.stats.consecutive_failures = h.consecutive_failures
        self.stats.startup_elapsed_s = h.startup_elapsed(now)
        self.stats.uptime_s = h.uptime(now)
        self.stats.restarts = h.restarts
        self.collector.log_stats(self.stats)
        self.version += 1

    def status(self) -> dict[str, Any]:
        """Everything the sidecar knows, as JSON-able values (NaN -> null)."""
        now = self.clock()
        h, st = self.health, self.stats
        state_dir = self.settings.state_dir
        return {
            "probes": {
                "startup": h.startup(now).as_dict(),
                "readiness": h.readiness(now).as_dict(),
                "liveness": h.liveness(now).as_dict(),
            },
            "engine": {
                "url": self.settings.engine_url,
                "up": h.up(),
                "ready": h.ready(),
                "draining": h.draining,
                "last_outcome": h.last_outcome,
                "last_status": h.last_status,
                "last_probe_age_s": (
                    None if h.last_probe_at is None else round(now - h.last_probe_at, 3)
                ),
                "consecutive_failures": h.consecutive_failures,
                "consecutive_timeouts_or_refusals": h.consecutive_hard_failures,
                "startup_elapsed_s": round(h.startup_elapsed(now), 3),
                "startup_budget_s": self.settings.startup_budget_s,
                "uptime_s": round(h.uptime(now), 3),
                "restarts": h.restarts,
                "errors": dict(st.errors),
            },
            "build": {"qwen_npu_version": st.qwen_npu_version, "sglang_version": st.sglang_version},
            "patches": {
                "state_file": None if state_dir is None else str(state_dir / STATE_FILE),
                "state_file_readable": self.state is not None,
                "states": dict(st.patch_states),
                "details": _patch_details(self.state),
            },
            "ub": {
                "engine": (self.state or {}).get("ub_plan"),
                "predicted": self.predicted_plan,
                "predicted_error": self.predicted_error,
                "mismatch": st.ub_mismatch,
            },
            "spec": {
                "enabled": st.spec_enabled,
                "algorithm": st.spec_algorithm,
                "num_steps": _finite(st.spec_num_steps),
                "num_draft_tokens": _finite(st.spec_num_draft_tokens),
                "window_s": self.settings.spec_window_s,
                "window_covered_s": round(self.spec.span_s(), 3),
                "accept_length": _finite(st.spec_accept_length),
                "accept_rate": _finite(st.spec_accept_rate),
                "server_info": self.server_info,
            },
            "canary": {
                "enabled": self.settings.canary_enabled,
                "interval_s": self.settings.canary_interval_s,
                "golden": self.golden is not None,
                "runs": dict(st.canary_runs),
                "last": self.canary_last,
                "last_success_ts": _finite(st.canary_last_success_ts),
            },
            "settings": self.settings.public_dict(),
        }


def _as_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def _patch_details(state: dict[str, Any] | None) -> dict[str, Any]:
    patches = state.get("patches") if state else None
    if not isinstance(patches, dict):
        return {}
    details: dict[str, Any] = {}
    for name, entry in list(patches.items())[:32]:
        if isinstance(entry, dict):
            details[str(name)] = {
                key: entry.get(key) for key in ("state", "target", "detail", "pid", "updated_at")
            }
    return details
