"""The info step: the patches' state file, the engine's ``/server_info`` and its ``/metrics``.

Why this exists: what changes slowly (patch states, the engine's UB plan, the speculative
settings) and the counters behind the acceptance window are read on their own, slower cadence,
and only while the engine's port answers (the state file is read always: the engine's processes
write it before the port opens).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from qwen_npu.patches.state import STATE_FILE, read_state
from qwen_npu.serve.catalogue import PATCH_NAMES, PATCH_STATES, SidecarStats
from qwen_npu.serve.sidecar import ub
from qwen_npu.serve.sidecar.config import Settings
from qwen_npu.serve.sidecar.engine import EngineClient, EngineError
from qwen_npu.serve.sidecar.errors import ErrorAccounting
from qwen_npu.serve.sidecar.health import HealthTracker
from qwen_npu.serve.sidecar.logs import RateLimiter, log
from qwen_npu.serve.sidecar.spec_window import (
    MetricsFormatError,
    SpecCounters,
    SpecWindow,
    parse_spec_counters,
)

_SPEC_OFF = (None, "", "none", "NONE")


def finite(value: float) -> float | None:
    """``value``, or None for NaN and infinities (JSON has neither)."""
    return value if math.isfinite(value) else None


def _as_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


class InfoReader:
    """``await reader()`` reads the state file, then ``/server_info`` and ``/metrics``."""

    def __init__(
        self,
        *,
        settings: Settings,
        engine: Callable[[], EngineClient],
        health: HealthTracker,
        spec: SpecWindow,
        stats: SidecarStats,
        errors: ErrorAccounting,
        clock: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.health = health
        self.spec = spec
        self.stats = stats
        self.errors = errors
        self.clock = clock
        self.state: dict[str, Any] | None = None  # the last state file read (None: unreadable)
        self.server_info: dict[str, Any] = {}  # the /status view of /server_info
        self._log_limiter = RateLimiter(60.0)

    async def __call__(self) -> None:
        await self.read_state_file()
        if self.health.last_outcome in (None, "refused"):
            return
        await self.read_server_info()
        await self.read_engine_metrics()

    async def read_state_file(self) -> None:
        directory = self.settings.state_dir
        state = await asyncio.to_thread(read_state, directory) if directory else None
        if state is None and self.state is not None and self._log_limiter.allow("state"):
            log(
                "warning",
                "state_file_unreadable",
                file=str(directory and directory / STATE_FILE),
                action="patch states and the engine UB plan are reported as unknown",
            )
        self.state = state
        patches = state.get("patches") if state else None
        states = dict.fromkeys(PATCH_NAMES, "unknown")
        if isinstance(patches, dict):
            for name, entry in patches.items():
                value = entry.get("state") if isinstance(entry, dict) else None
                states[str(name)] = value if value in PATCH_STATES else "unknown"
        st = self.stats
        st.patch_states = states
        st.ub["engine"] = ub.stats_from_plan(state.get("ub_plan") if state else None)
        st.ub_mismatch = ub.mismatch(st.ub["engine"], st.ub["predicted"])
        version = state.get("sglang_version") if state else None
        if isinstance(version, str) and version:
            st.sglang_version = version

    async def read_server_info(self) -> None:
        path = "/server_info"
        try:
            response = await self.engine().request(
                "GET", path, timeout=self.settings.request_timeout_s
            )
            if response.status != 200:
                raise EngineError("status", f"HTTP {response.status}", response.status)
            info = response.json_object()
        except EngineError as exc:
            self.errors.count(exc, path)
            return
        st = self.stats
        algorithm = info.get("speculative_algorithm")
        enabled = algorithm not in _SPEC_OFF
        st.spec_enabled = enabled
        st.spec_algorithm = str(algorithm) if enabled else "none"
        st.spec_num_steps = _as_float(info.get("speculative_num_steps")) if enabled else 0.0
        st.spec_num_draft_tokens = (
            _as_float(info.get("speculative_num_draft_tokens")) if enabled else 0.0
        )
        version = info.get("version")
        if isinstance(version, str) and version and st.sglang_version == "unknown":
            st.sglang_version = version[:64]
        states = info.get("internal_states")
        lifetime = None
        if isinstance(states, list) and states and isinstance(states[0], dict):
            lifetime = states[0].get("avg_spec_accept_length")
        self.server_info = {
            "speculative_algorithm": st.spec_algorithm,
            "speculative_num_steps": finite(st.spec_num_steps),
            "speculative_num_draft_tokens": finite(st.spec_num_draft_tokens),
            "version": version if isinstance(version, str) else None,
            "avg_spec_accept_length_lifetime": (
                lifetime if isinstance(lifetime, int | float) else None
            ),
        }

    async def read_engine_metrics(self) -> None:
        path = "/metrics"
        try:
            response = await self.engine().request(
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
            self.errors.count(exc, path)
            return
        # An engine that has not verified yet may export neither counter: that is zero, so the
        # window starts now rather than at the first scrape after the first finished request.
        self.spec.add(self.clock(), counters or SpecCounters(0.0, 0.0))
        self.stats.spec_accept_length = self.spec.accept_length()
        self.stats.spec_accept_rate = self.spec.accept_rate(self.stats.spec_num_draft_tokens)
