"""The canary step: one greedy ``POST /generate`` while the engine is ready, scored and counted.

Why this exists: the scoring (``canary.score``) is pure; this is the exchange around it: skip
while the engine is not ready or a run is still in flight, send the fixed prompt, count the result
in ``qwen_npu_canary_runs_total{result}``, log a bad result once a minute and keep the last run
for ``/status``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from qwen_npu.serve.catalogue import SidecarStats
from qwen_npu.serve.sidecar import canary
from qwen_npu.serve.sidecar.config import Settings
from qwen_npu.serve.sidecar.engine import EngineClient, EngineError
from qwen_npu.serve.sidecar.errors import ErrorAccounting
from qwen_npu.serve.sidecar.health import HealthTracker
from qwen_npu.serve.sidecar.logs import RateLimiter, log
from qwen_npu.serve.sidecar.publish import Publisher

GENERATE_PATH = "/generate"


class CanaryRunner:
    """``await runner()`` runs one canary when the engine is ready and none is in flight."""

    def __init__(
        self,
        *,
        settings: Settings,
        engine: Callable[[], EngineClient],
        health: HealthTracker,
        stats: SidecarStats,
        errors: ErrorAccounting,
        publisher: Publisher,
        clock: Callable[[], float],
        wall: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.health = health
        self.stats = stats
        self.errors = errors
        self.publisher = publisher
        self.clock = clock
        self.wall = wall
        self.golden = settings.golden_text()
        self.last: dict[str, Any] = {}  # the last run, for /status
        self._lock = asyncio.Lock()
        self._log_limiter = RateLimiter(60.0)

    async def __call__(self) -> None:
        if not self.health.ready() or self._lock.locked():
            return
        async with self._lock:
            await self._once()

    async def _once(self) -> None:
        s = self.settings
        body = {
            "text": s.canary_prompt,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": s.canary_max_tokens},
        }
        t0 = self.clock()
        try:
            response = await self.engine().request(
                "POST", GENERATE_PATH, timeout=s.canary_timeout_s, json_body=body
            )
            if response.status != 200:
                raise EngineError("status", f"HTTP {response.status}", response.status)
            text = response.json_object().get("text")
            if not isinstance(text, str):
                raise EngineError("malformed", "/generate answer has no string 'text'")
        except EngineError as exc:
            self.errors.count(exc, GENERATE_PATH)
            self.stats.canary_runs["error"] += 1
            self.last = {"result": "error", "error": str(exc), "at": self.wall()}
            return
        latency = self.clock() - t0
        self.publisher.observe("canary_latency_seconds", latency)
        scored = canary.score(text.strip(), self.golden)
        result = scored.result(s.canary_degeneration_max, s.canary_golden_min_ratio)
        st = self.stats
        st.canary_runs[result] += 1
        st.canary_degeneration_score = scored.degeneration_score
        st.canary_longest_repeat_tokens = float(scored.longest_repeat_tokens)
        ratio = scored.golden_prefix_ratio
        st.canary_golden_prefix_ratio = math.nan if ratio is None else ratio
        if result == "ok":
            st.canary_last_success_ts = self.wall()
        elif self._log_limiter.allow(f"canary-{result}"):
            log(
                "warning",
                "canary_" + result,
                score=round(scored.degeneration_score, 3),
                longest_repeat=scored.longest_repeat_tokens,
                golden_prefix_ratio=ratio,
                output=text[:200],
                action="see docs/runbook.md#qwennpucanarydegenerated; "
                "if MTP is on, compare with make mtp-off",
            )
        self.last = {
            "result": result,
            "at": self.wall(),
            "latency_s": round(latency, 4),
            "tokens": scored.tokens,
            "degeneration_score": round(scored.degeneration_score, 4),
            "longest_repeat_tokens": scored.longest_repeat_tokens,
            "golden_prefix_ratio": ratio,
            "golden_prefix_chars": scored.golden_prefix_chars,
            "output_head": text[:200],
        }
