"""Probe semantics: what /startupz, /readyz and /livez say for each sequence of health results."""

from __future__ import annotations

from qwen_npu.sidecar.health import HealthTracker, Outcome, classify


def tracker(budget: float = 100.0, failures: int = 3) -> HealthTracker:
    return HealthTracker(startup_budget_s=budget, liveness_failures=failures, now=0.0)


def feed(h: HealthTracker, outcomes: list[Outcome], start: float = 1.0, step: float = 1.0) -> float:
    t = start
    for outcome in outcomes:
        h.record(outcome, t)
        t += step
    return t


def verdicts(h: HealthTracker, now: float) -> tuple[bool, bool, bool]:
    return h.startup(now).ok, h.readiness(now).ok, h.liveness(now).ok


def test_classify_tells_a_drain_from_a_stuck_scheduler() -> None:
    assert classify(200, 1.0) == "ok"
    assert classify(503, 0.01) == "unavailable"  # SGLang starting or shutting down: at once
    assert classify(503, 20.0) == "unhealthy"  # its 1-token generate saw no output for 20 s
    assert classify(500, 0.01) == "http_error"


def test_loading_engine_is_starting_and_alive_until_the_budget() -> None:
    h = tracker(budget=100)
    now = feed(h, ["refused"] * 10 + ["unavailable"] * 5)
    assert verdicts(h, now) == (False, False, True)
    assert "starting" in h.startup(now).reason
    assert h.up() and not h.ready()
    # Past the budget: startup and liveness both fail, and say why.
    assert verdicts(h, 150.0) == (False, False, False)
    assert "budget exceeded" in h.startup(150.0).reason
    assert "stuck starting" in h.liveness(150.0).reason


def test_first_200_passes_startup_and_readiness_and_freezes_elapsed() -> None:
    h = tracker()
    feed(h, ["refused", "refused", "unavailable"], start=10.0)  # t = 10, 11, 12
    h.record("ok", 13.0)
    assert verdicts(h, 14.0) == (True, True, True)
    assert h.startup_elapsed(13.0) == h.startup_elapsed(500.0) == 13.0
    assert h.uptime(20.0) == 7.0
    assert not h.over_budget(10_000.0)


def test_slowness_and_http_errors_never_fail_liveness() -> None:
    h = tracker(failures=2)
    feed(h, ["ok"] + ["http_error"] * 10 + ["unavailable"] * 3)
    assert h.liveness(100.0).ok
    assert not h.readiness(100.0).ok
    assert h.consecutive_failures == 13
    assert h.consecutive_hard_failures == 0


def test_n_consecutive_timeouts_fail_liveness_and_a_200_heals() -> None:
    h = tracker(failures=3)
    now = feed(h, ["ok", "timeout", "timeout"])
    assert h.liveness(now).ok
    h.record("timeout", now)
    assert not h.liveness(now).ok
    assert "stuck or dead" in h.liveness(now).reason
    assert h.startup(now).ok  # the start is not over: the port still answers
    h.record("ok", now + 1)
    assert verdicts(h, now + 1) == (True, True, True)


def test_an_answer_between_timeouts_restarts_the_count() -> None:
    h = tracker(failures=3)
    feed(h, ["ok", "timeout", "timeout", "http_error", "timeout", "timeout"])
    assert h.liveness(10.0).ok  # the HTTP error proves the server answers


def test_stuck_scheduler_503_counts_for_liveness_but_is_no_drain() -> None:
    h = tracker(failures=2)
    feed(h, ["ok", "unhealthy", "unhealthy"])
    assert not h.draining
    assert not h.liveness(10.0).ok
    assert "stuck-scheduler" in h.liveness(10.0).reason


def test_quick_503_after_ready_is_a_drain() -> None:
    h = tracker()
    events: list[str] = []
    events += h.record("ok", 1.0)
    events += h.record("unavailable", 2.0)
    assert events == ["engine_ready", "engine_draining"]
    assert h.draining
    assert verdicts(h, 3.0) == (True, False, True)
    assert "draining" in h.readiness(3.0).reason


def test_crash_ends_the_start_counts_a_restart_and_the_next_start_must_pass_again() -> None:
    h = tracker(failures=2, budget=100)
    feed(h, ["ok"] * 3)  # t = 1..3, ready at 1
    events = h.record("refused", 50.0)
    assert "engine_start_ended" in events
    assert h.restarts == 1
    assert not h.startup(50.0).ok  # the restarted container must pass startup again
    h.record("refused", 51.0)
    assert not h.liveness(51.0).ok  # a dead engine whose container lives on gets restarted
    # The new engine loads, opens its port, warms up, becomes ready.
    h.record("unavailable", 80.0)
    assert h.liveness(80.0).ok and not h.startup(80.0).ok
    assert h.startup_elapsed(80.0) == 30.0  # since the crash was seen
    h.record("ok", 90.0)
    assert verdicts(h, 90.0) == (True, True, True)
    assert h.startup_elapsed(1000.0) == 40.0
    assert h.restarts == 1


def test_refusals_before_the_first_ready_are_loading_not_restarts() -> None:
    h = tracker()
    feed(h, ["refused", "unavailable", "refused", "unavailable", "ok"])
    assert h.restarts == 0
    assert h.ready()


def test_liveness_threshold_is_exact() -> None:
    for n in (1, 2, 5):
        h = tracker(failures=n)
        h.record("ok", 0.5)
        feed(h, ["timeout"] * (n - 1))
        assert h.liveness(100.0).ok, n
        h.record("timeout", 100.0)
        assert not h.liveness(100.0).ok, n
