"""Error accounting: one failed engine exchange becomes one count and at most one log line a minute.

Why this exists: ``qwen_npu_engine_errors_total{kind}`` and the ``engine_error`` log line must mean
the same thing for the probe, the info reads and the canary. Reachability is the health loop's to
count (once per lost engine start), so a ``connect`` error elsewhere is not counted again.
"""

from __future__ import annotations

from qwen_npu.serve.sidecar.engine import EngineError
from qwen_npu.serve.sidecar.logs import RateLimiter, log

#: The health probe's path: the only place a refused connection is counted.
HEALTH_PATH = "/health_generate"


class ErrorAccounting:
    """Counts ``EngineError``s into ``totals`` (the ``SidecarStats.errors`` dict) and logs them."""

    def __init__(self, totals: dict[str, int], limiter: RateLimiter) -> None:
        self.totals = totals
        self.limiter = limiter

    def count(self, exc: EngineError, where: str) -> None:
        if exc.kind == "connect" and where != HEALTH_PATH:
            return  # reachability is the health loop's to count: once per lost engine start
        self.totals[exc.kind] = self.totals.get(exc.kind, 0) + 1
        if self.limiter.allow(f"{exc.kind}-{where}"):
            log(
                "warning",
                "engine_error",
                kind=exc.kind,
                where=where,
                detail=exc.detail,
                action="counted in qwen_npu_engine_errors_total; logged once a minute",
            )
