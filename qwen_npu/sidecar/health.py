"""Engine health: the probe of ``GET /health_generate`` and the state machine behind the kubelet's
three probes of the engine container, each meaning one thing (docs/sidecar.md "Probes").

``HealthTracker`` is pure logic over an injected clock, so tests drive it without an engine or
sleeps; ``EngineStep`` is what every step that talks to the engine (this probe, the info reads,
the canary) is handed by the monitor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client import Histogram

from qwen_npu.log import PartLog
from qwen_npu.metrics.catalogue import BY_NAME, PREFIX
from qwen_npu.sidecar.config import Settings
from qwen_npu.sidecar.engine_client import HEALTH_PATH, EngineClient, EngineError, EngineErrors

log = PartLog("sidecar")

Outcome = Literal["ok", "unavailable", "unhealthy", "http_error", "timeout", "refused"]
#: Outcomes that mean stuck or dead (they count towards liveness).
HARD_FAILURES: tuple[Outcome, ...] = ("timeout", "refused", "unhealthy")
#: SGLang answers 503 at once while starting or draining, but after >= 1 s (its check loop's
#: sleep) when its own 1-token generate got no output: a stuck scheduler
#: (tests/sidecar/test_sglang_health.py holds this to SGLang's handler).
STUCK_503_MIN_S = 0.9


def classify(status: int, seconds: float) -> Outcome:
    """The outcome of a /health_generate answer with HTTP ``status`` after ``seconds``."""
    if status == 200:
        return "ok"
    if status == 503:
        return "unhealthy" if seconds >= STUCK_503_MIN_S else "unavailable"
    return "http_error"


@dataclass(frozen=True)
class Verdict:
    """One probe's answer; ``dataclasses.asdict`` of it is the probe's JSON body."""

    status: Literal["ok", "fail"]
    reason: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def histogram(name: str) -> Histogram:
    """The unregistered histogram ``qwen_npu_<name>`` of ``CATALOGUE`` (the collector exports
    it)."""
    spec = BY_NAME[PREFIX + name]
    return Histogram(spec.name, spec.help, buckets=spec.buckets, registry=None)


class HealthTracker:
    """Folds /health_generate results into the state behind /startupz, /readyz and /livez."""

    def __init__(self, *, startup_budget_s: float, liveness_failures: int, now: float) -> None:
        self.startup_budget_s = startup_budget_s
        self.liveness_failures = liveness_failures
        self.start_began_at = now  # this engine start began (sidecar start or engine restart)
        self.ready_at: float | None = None  # first 200 of this start
        self.started = False  # this start has answered 200
        self.ever_ready = False  # any start has answered 200 (for restart detection)
        self.unreachable = False  # the last probe was refused
        self.last_outcome: Outcome | None = None
        self.last_status: int | None = None
        self.last_probe_at: float | None = None
        self.consecutive_failures = 0  # any non-200
        self.consecutive_hard_failures = 0  # timeouts, refusals and stuck 503s (HARD_FAILURES)
        self.draining = False
        self.restarts = 0

    # Input.
    def record(self, outcome: Outcome, now: float, status: int | None = None) -> list[str]:
        """Fold one probe result in; returns the transitions it caused (for the log)."""
        events: list[str] = []
        self.last_outcome, self.last_status, self.last_probe_at = outcome, status, now
        if outcome == "refused":
            if not self.unreachable:
                events.append("engine_unreachable")
            self.unreachable = True
            if self.started:
                # The process behind the port is gone: this start is over, the next one begins.
                self.started = False
                self.draining = False
                self.restarts += 1
                self.start_began_at = now
                self.ready_at = None
                events.append("engine_start_ended")
        elif self.unreachable:
            self.unreachable = False
            events.append("engine_reachable")
        if outcome == "ok":
            self.consecutive_failures = 0
            self.consecutive_hard_failures = 0
            self.draining = False
            if not self.started:
                self.started = True
                self.ever_ready = True
                if self.ready_at is None:
                    self.ready_at = now
                events.append("engine_ready")
            return events
        self.consecutive_failures += 1
        if outcome in HARD_FAILURES:
            self.consecutive_hard_failures += 1
            if self.consecutive_hard_failures == self.liveness_failures and self.ever_ready:
                events.append("engine_stuck_or_dead")
        else:
            self.consecutive_hard_failures = 0
        if outcome == "unavailable" and self.started and not self.draining:
            self.draining = True
            events.append("engine_draining")
        return events

    # Derived values.
    def up(self) -> bool:
        """The engine's HTTP server answers (any status, timeouts excluded)."""
        return self.last_outcome in ("ok", "unavailable", "unhealthy", "http_error")

    def ready(self) -> bool:
        return self.last_outcome == "ok" and not self.draining

    def startup_elapsed(self, now: float) -> float:
        end = self.ready_at if self.ready_at is not None else now
        return max(0.0, end - self.start_began_at)

    def uptime(self, now: float) -> float:
        if self.ready_at is None:
            return 0.0
        return max(0.0, now - self.ready_at)

    def over_budget(self, now: float) -> str:
        """'' within the startup budget (or once ready), else how far over it this start is."""
        elapsed = self.startup_elapsed(now)
        if self.ready_at is not None or elapsed <= self.startup_budget_s:
            return ""
        return f"not ready after {elapsed:.0f}s (budget {self.startup_budget_s:.0f}s)"

    # The three verdicts.
    def startup(self, now: float) -> Verdict:
        if self.started:
            return Verdict("ok", "engine answered /health_generate 200 in this start")
        if late := self.over_budget(now):
            return Verdict("fail", f"startup budget exceeded: {late}")
        elapsed = self.startup_elapsed(now)
        return Verdict("fail", f"starting: {self._describe_last()} ({elapsed:.0f}s elapsed)")

    def readiness(self, now: float) -> Verdict:
        if self.draining:
            return Verdict("fail", "draining: engine answers 503 after having been ready")
        if self.ready():
            return Verdict("ok", "engine healthy")
        return Verdict("fail", f"not ready: {self._describe_last()}")

    def liveness(self, now: float) -> Verdict:
        hard, limit = self.consecutive_hard_failures, self.liveness_failures
        if self.ever_ready and hard >= limit:
            what = {"refused": "refused", "unhealthy": "got SGLang's stuck-scheduler 503"}.get(
                str(self.last_outcome), "timed out"
            )
            return Verdict("fail", f"stuck or dead: last {hard} health probes {what}")
        if late := self.over_budget(now):
            return Verdict("fail", f"stuck starting: {late}")
        return Verdict("ok", "alive")

    def _describe_last(self) -> str:
        return {
            None: "no health probe yet",
            "ok": "engine healthy",
            "unavailable": "engine answers 503",
            "unhealthy": "engine answers 503 after its health generate got no output (stuck)",
            "http_error": f"engine answers HTTP {self.last_status}",
            "timeout": "health probe timed out",
            "refused": "engine port refuses connections",
        }[self.last_outcome]


#: Level and what to do next per health transition (the others: info, none).
ACTIONS: dict[str, tuple[str, str]] = {
    "engine_unreachable": ("warning", "check the engine container: kubectl logs -c engine"),
    "engine_start_ended": (
        "warning",
        "the engine process went away; kubectl describe pod for the exit reason and restarts",
    ),
    "engine_draining": (
        "warning",
        "expected during rollout or shutdown; otherwise check engine log",
    ),
    "engine_stuck_or_dead": (
        "error",
        "liveness fails now, the kubelet restarts the engine; save its log (docs/runbook.md)",
    ),
}


@dataclass(eq=False)  # a step is itself, not its fields
class EngineStep:
    """A step on its own cadence with what the monitor hands it: the settings, the engine client,
    the health tracker it asks before it sends, the error counts and the clock."""

    settings: Settings
    engine: Callable[[], EngineClient]
    health: HealthTracker
    errors: EngineErrors
    clock: Callable[[], float]


@dataclass(eq=False)
class HealthProbe(EngineStep):
    """``await probe()`` runs one health probe of the engine and folds it into ``health``."""

    latency: Histogram = field(default_factory=lambda: histogram("engine_health_probe_seconds"))

    async def __call__(self) -> None:
        t0 = self.clock()
        outcome, status = await self._exchange()
        now = self.clock()
        self.latency.observe(now - t0)
        for event in self.health.record(outcome, now, status):
            self._log(event, outcome, status)

    async def _exchange(self) -> tuple[Outcome, int | None]:
        started_before = self.health.started
        timeout = self.settings.health_timeout_s
        try:
            response = await self.engine().request("GET", HEALTH_PATH, timeout=timeout)
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
            engine_url=self.settings.engine_url,
            outcome=outcome,
            status=status,
            restarts=self.health.restarts,
            next=action,
        )
