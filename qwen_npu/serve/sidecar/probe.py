"""The health step: one ``GET /health_generate``, folded into the probe state machine and logged.

Why this exists: this is the step behind the kubelet's three probes. It turns one exchange into
one ``Outcome`` (``health.classify``), counts the failures that matter, times the probe for
``qwen_npu_engine_health_probe_seconds`` and logs each transition with what to do next.
"""

from __future__ import annotations

from collections.abc import Callable

from qwen_npu.serve.sidecar.engine import EngineClient, EngineError
from qwen_npu.serve.sidecar.errors import HEALTH_PATH, ErrorAccounting
from qwen_npu.serve.sidecar.health import HealthTracker, Outcome, classify
from qwen_npu.serve.sidecar.logs import log
from qwen_npu.serve.sidecar.publish import Publisher
from qwen_npu.serve.sidecar.spec_window import SpecWindow

#: What to do next, per health transition (the ``action`` of its log line).
ACTIONS: dict[str, tuple[str, str]] = {
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


class HealthProbe:
    """``await probe()`` runs one health probe of the engine."""

    def __init__(
        self,
        *,
        engine: Callable[[], EngineClient],
        engine_url: str,
        timeout_s: float,
        health: HealthTracker,
        spec: SpecWindow,
        errors: ErrorAccounting,
        publisher: Publisher,
        clock: Callable[[], float],
    ) -> None:
        self.engine = engine
        self.engine_url = engine_url
        self.timeout_s = timeout_s
        self.health = health
        self.spec = spec
        self.errors = errors
        self.publisher = publisher
        self.clock = clock

    async def __call__(self) -> None:
        t0 = self.clock()
        outcome, status = await self._exchange()
        now = self.clock()
        self.publisher.observe("engine_health_probe_seconds", now - t0)
        for event in self.health.record(outcome, now, status):
            self._log(event, outcome, status)
            if event == "engine_start_ended":
                self.spec.clear()

    async def _exchange(self) -> tuple[Outcome, int | None]:
        started_before = self.health.started
        try:
            response = await self.engine().request("GET", HEALTH_PATH, timeout=self.timeout_s)
        except EngineError as exc:
            if exc.kind == "connect":
                if started_before:
                    self.errors.count(exc, HEALTH_PATH)
                return "refused", None
            self.errors.count(exc, HEALTH_PATH)
            return ("timeout" if exc.kind == "timeout" else "http_error"), None
        outcome = classify(response.status, response.seconds)
        if outcome in ("http_error", "unhealthy"):
            detail = f"HTTP {response.status} after {response.seconds:.1f}s"
            self.errors.count(EngineError("status", detail, response.status), HEALTH_PATH)
        return outcome, response.status

    def _log(self, event: str, outcome: Outcome, status: int | None) -> None:
        level, action = ACTIONS.get(event, ("info", "none"))
        if event == "engine_unreachable" and not self.health.ever_ready:
            level, action = "info", "none: the engine opens its port when the model is loaded"
        log(
            level,
            event,
            engine_url=self.engine_url,
            outcome=outcome,
            status=status,
            restarts=self.health.restarts,
            action=action,
        )
