"""The real router (pinned sglang-router, from `make router-venv`) in front of simulator replicas,
each with its sidecar, under the bench runner at CONC 10: the four scenarios of `make failover`
(tools/proofs/failover.py) with few requests and fast simulator timings. Counts are asserted, never
times: the time figures are `make failover`'s (out/perf/failover.md).
"""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from qwen_npu.metrics.external import ROUTER_METRICS
from tools.proofs import failover

pytestmark = pytest.mark.slow

FAST = failover.Settings(
    replicas=2,
    concurrency=10,
    input_len=16,
    output_len=12,
    ttft_ms=10.0,
    itl_ms=5.0,
    startup_delay_s=2.0,
    drain_check_s=0.05,
    warm_requests=15,
    tail_requests=15,
    num_prompts=20000,  # an upper bound: a slow rolling replacement must not outlast the load
)


@pytest.fixture(scope="module")
def router_bin() -> Path:
    try:
        return failover.router_bin()
    except failover.FailoverError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("failover")


def run(name: str, workdir: Path) -> dict[str, Any]:
    rec = failover.run_scenario(name, FAST, workdir)
    assert rec["sent"] > FAST.warm_requests, rec
    assert rec["router_hub_requests"] == 0, "the router asked the Hugging Face hub (router.log)"
    return rec


def test_every_flag_we_pass_is_one_the_pinned_router_accepts(router_bin: Path) -> None:
    help_text = subprocess.run(
        [str(router_bin), "launch", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    args = failover.router_args(FAST, 30000, 29000, ["http://127.0.0.1:1"])
    assert failover.unknown_flags(args, help_text) == []
    assert failover.unknown_flags(["--no-such-flag", "1"], help_text) == ["--no-such-flag"]


def test_the_harness_runs_the_charts_router_command_with_fixed_workers() -> None:
    """The chart renders the router's flags; the harness only swaps service discovery for worker
    URLs and listens on 127.0.0.1."""
    values = failover.router_values(FAST, 30001, 29001)
    rendered = failover.rendered_router_args(values)
    workers = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    local = failover.local_router_args(rendered, workers)
    expected = list(rendered)
    for flag in ("--host", "--prometheus-host"):
        expected[expected.index(flag) + 1] = "127.0.0.1"
    i = expected.index("--service-discovery")
    j = expected.index("--service-discovery-namespace") + 2
    assert local == [*expected[:i], "--worker-urls", *workers, *expected[j:]]
    assert not any(a.startswith("--service-discovery") or a == "--selector" for a in local)
    # The harness's timings reach the command through the chart's values.
    pairs = {a: b for a, b in itertools.pairwise(local) if a.startswith("--")}
    assert pairs["--health-check-interval-secs"] == str(FAST.health_interval_s)
    assert pairs["--health-failure-threshold"] == str(FAST.failure_threshold)
    assert pairs["--port"] == "30001" and pairs["--prometheus-port"] == "29001"


def test_rolling_replacement_drops_nothing(router_bin: Path, workdir: Path) -> None:
    rec = run("rolling", workdir)
    assert rec["failed"] == 0, rec["errors"]
    assert rec["exit_codes"] == [0, 0]  # every old replica drained and exited 0
    # The router admitted the new replicas only once their /health said 200.
    assert set(rec["requests_before_ready"].values()) == {0}


def test_sigkill_loses_at_most_what_was_in_flight(router_bin: Path, workdir: Path) -> None:
    rec = run("kill", workdir)
    assert rec["failed"] <= rec["in_flight_on_bad"], rec
    assert rec["sent_to_bad_after_bound"] == 0
    assert rec["failed_after_bound"] == 0


def test_a_hung_replica_is_ejected_and_nothing_is_lost_after(
    router_bin: Path, workdir: Path
) -> None:
    rec = run("hang", workdir)
    assert rec["sent_to_bad_after_bound"] == 0, rec
    assert rec["failed_after_bound"] == 0, rec
    assert rec["failed"] <= rec["stuck_on_bad"], rec  # only the requests stuck on it


def test_a_loading_replica_gets_nothing_before_its_health_says_200(
    router_bin: Path, workdir: Path
) -> None:
    rec = run("loading", workdir)
    assert rec["failed"] == 0, rec["errors"]
    assert rec["requests_before_ready"] == 0
    assert rec["requests_after_ready"] > 0


def test_the_router_exports_every_series_the_dashboards_read(
    router_bin: Path, workdir: Path
) -> None:
    dumps = sorted(workdir.glob("*/router-metrics.txt"))
    if not dumps:  # run alone (-k): make the router's /metrics dump with one short scenario
        run("loading", workdir)
        dumps = sorted(workdir.glob("*/router-metrics.txt"))
    names = {line.split("{", 1)[0] for d in dumps for line in d.read_text().splitlines()}
    missing = [m.name for m in ROUTER_METRICS if not set(m.series_names()) & names]
    assert not missing, f"the pinned router does not export {missing}"


def test_report_states_each_goal(tmp_path: Path) -> None:
    rec = {
        "scenario": "kill", "sent": 10, "failed": 2, "retried_by_router": 1,
        "in_flight_on_bad": 2, "stopped_sending_after_s": 0.5, "sent_to_bad_after_bound": 0,
        "p99_ttft_before_ms": 1.0, "p99_ttft_during_ms": 2.0, "eject_bound_s": 2.0,
        "settings": {"replicas": 2, "concurrency": 10},
    }  # fmt: skip
    md = tmp_path / "failover.md"
    failover.write_report([rec, {**rec, "failed": 3}], md)
    rows = [line for line in md.read_text().splitlines() if line.startswith("| kill")]
    assert rows[0].endswith("| yes |") and rows[1].endswith("| NO |")
    assert md.with_suffix(".jsonl").read_text().count("\n") == 2


def test_bounds_are_interval_times_misses_plus_timeouts_for_a_hang() -> None:
    s = replace(FAST, health_interval_s=3, failure_threshold=4, health_timeout_s=2)
    assert s.eject_bound_s() == 12.0
    assert s.bound_for("kill") == 12.0 and s.bound_for("hang") == 20.0


def test_hub_requests_are_counted_from_the_router_log(tmp_path: Path) -> None:
    log = tmp_path / "router.log"
    log.write_text(
        "INFO Loading tokenizer '/m' from source: /m\n"
        "WARN Failed to load tokenizer for model q from q: Failed to download tokenizer from "
        "HuggingFace: error sending request for url (https://huggingface.co/api/models/q)\n"
    )
    assert failover.hub_requests(log) == 1
    assert failover.hub_requests(tmp_path / "missing.log") == 0
