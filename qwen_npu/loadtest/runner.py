"""One measured phase with locust as a library: wait for the target, warm up, scrape the counters,
CONC users (or a master and WORKERS local workers) until N results, scrape again (docs/loadtest.md).
The duration runs from the start of the users to the last result; Ctrl-C or SIGTERM stops the users
and keeps what was measured.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

import gevent  # type: ignore[import-untyped]
from gevent.event import Event  # type: ignore[import-untyped]
from locust.env import Environment
from locust.runners import MasterRunner

import requests  # isort: skip  (after locust: gevent's monkey-patching comes first)

from qwen_npu import processes
from qwen_npu.loadtest import locustfile as lf
from qwen_npu.loadtest.backends import RequestInput, RequestOutput
from qwen_npu.loadtest.config import ENV_VAR, BenchConfig
from qwen_npu.loadtest.progress import TargetNotReady, say
from qwen_npu.loadtest.server_counters import accept_length, scrape

# Locust warns about a spawn rate above 100/s; starting all CONC users at once is the point here.
logging.getLogger("locust.runners").setLevel(logging.ERROR)
PROGRESS_EVERY_S = 2.0


@dataclass
class RunResult:
    outputs: list[RequestOutput]
    duration_s: float
    accept_length: float | None
    server_info: Any
    interrupted: bool


def wait_ready(config: BenchConfig) -> None:
    deadline = time.monotonic() + config.ready_timeout_s
    url = config.target.rstrip("/") + "/v1/models"
    last = ""
    say("waiting_for_target", url=url, timeout_s=f"{config.ready_timeout_s:.0f}")
    while time.monotonic() < deadline:
        try:
            resp = requests.get(url, timeout=5)
            if resp.status_code == 200:
                return
            if resp.status_code == 404:  # a server that is up but is not SGLang's root: no wait
                raise TargetNotReady(
                    f"--target {config.target} answers HTTP 404 to GET /v1/models: it is "
                    "not an SGLang server's base URL; pass --target http://<host>:<port> (no path)"
                )
            last = f"HTTP {resp.status_code}"
        except requests.RequestException as exc:
            last = type(exc).__name__
        gevent.sleep(0.5)
    raise TargetNotReady(
        f"--target {config.target} did not answer GET /v1/models within "
        f"{config.ready_timeout_s:g}s (last: {last}); start the engine or the simulator "
        f"(qwen-npu sim), or pass --target <url>"
    )


def warm_up(config: BenchConfig, state: lf.BenchState) -> None:
    """Row 0 with at most 32 new tokens; HTTP 503 (engine still starting) is retried until ready."""
    row = state.rows[0]
    row = replace(row, output_len=min(row.output_len, 32))
    session = requests.Session()
    deadline = time.monotonic() + config.ready_timeout_s
    while True:
        out = state.backend.request(session, RequestInput(config.target, row, config.model))
        if out.success:
            return
        if out.error != "HTTP 503" or time.monotonic() > deadline:
            break
        gevent.sleep(0.5)
    raise TargetNotReady(
        f"bench: the warm-up request to {config.target}{state.backend.path} failed "
        f"(reason={out.error}); check the engine's log and that API={config.api} matches it"
    )


def server_info(config: BenchConfig) -> Any:
    try:
        resp = requests.get(config.target.rstrip("/") + "/server_info", timeout=5)
        return resp.json() if resp.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None


class Collector:
    """Gathers results; stamps the arrival of the last expected one."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.outputs: list[RequestOutput] = []
        self.done_at: float | None = None

    def add(self, out: RequestOutput) -> None:
        self.outputs.append(out)
        if len(self.outputs) >= self.expected and self.done_at is None:
            self.done_at = time.perf_counter()


def _start_workers(config: BenchConfig, port: int) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, **{ENV_VAR: config.to_json(), "QWEN_NPU_BENCH_TARGET": config.target})
    cmd = [sys.executable, "-m", "locust", "-f", lf.__file__, "--worker", "--loglevel", "WARNING"]
    cmd += ["--master-host", "127.0.0.1", "--master-port", str(port)]
    return [processes.start(cmd, env=env, inherit_output=True) for _ in range(config.workers)]


def run(config: BenchConfig) -> RunResult:
    """One measured phase. Raises TargetNotReady before anything is measured."""
    lf.BenchUser.host = config.target
    num_prompts = config.data.num_prompts
    collector = Collector(num_prompts)
    tickets = lf.CountingTickets(num_prompts)
    state = lf.BenchState(config, tickets, collector.add)
    wait_ready(config)
    if config.warmup:
        warm_up(config, state)
    before = scrape(config.target)

    env = Environment(user_classes=[lf.BenchUser], host=config.target)
    env.qwen_bench = state  # type: ignore[attr-defined]
    workers: list[subprocess.Popen[bytes]] = []
    if config.workers > 0:
        port = processes.free_port()
        runner: Any = env.create_master_runner("127.0.0.1", port)
        assert isinstance(runner, MasterRunner)
        lf.serve_tickets(runner, tickets)
        runner.register_message(
            lf.MSG_RESULT,
            lambda environment, msg, **_: collector.add(RequestOutput.from_dict(msg.data)),
        )
        workers = _start_workers(config, port)
        deadline = time.monotonic() + 60
        while len(runner.clients.ready) < config.workers:
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                _stop(runner, workers)
                raise TargetNotReady(
                    f"bench: {config.workers} locust workers did not connect to the master on "
                    f"127.0.0.1:{port} within 60s; run with WORKERS=0 or check `locust --version`"
                )
            gevent.sleep(0.1)
    else:
        runner = env.create_local_runner()
        # Every user's connection open before the clock starts (workers open theirs at start).
        state.prewarm(config.target, config.concurrency)

    stop = Event()
    gevent.signal_handler(signal.SIGINT, stop.set)
    gevent.signal_handler(signal.SIGTERM, stop.set)

    say(
        "measure",
        target=config.target,
        api=config.api,
        concurrency=config.concurrency,
        num_prompts=num_prompts,
        workers=config.workers,
        next="Ctrl-C stops and keeps what was measured",
    )
    t0 = time.perf_counter()
    runner.start(config.concurrency, spawn_rate=max(config.concurrency, 1) * 1000)
    last_report = t0
    while collector.done_at is None and not stop.is_set():
        gevent.sleep(0.05)
        now = time.perf_counter()
        if now - last_report >= PROGRESS_EVERY_S:
            last_report = now
            done = len(collector.outputs)
            failed = sum(1 for o in collector.outputs if not o.success)
            say(
                "progress",
                done=f"{done}/{num_prompts}",
                failed=failed,
                elapsed_s=f"{now - t0:.1f}",
                req_per_s=f"{done / (now - t0):.2f}",
            )
        if config.workers > 0 and all(w.poll() is not None for w in workers):
            say(
                "workers_exited",
                "error",
                what="every locust worker exited; keeping what was measured",
            )
            break
    end = collector.done_at or time.perf_counter()
    interrupted = stop.is_set() and collector.done_at is None
    tickets.stopped = True
    after = scrape(config.target)
    info = server_info(config)
    _stop(runner, workers)
    return RunResult(
        outputs=list(collector.outputs[:num_prompts]),
        duration_s=max(end - t0, 1e-9),
        accept_length=accept_length(before, after),
        server_info=info,
        interrupted=interrupted,
    )


def _stop(runner: Any, workers: list[subprocess.Popen[bytes]]) -> None:
    try:
        runner.quit()
    except Exception as exc:  # stopping must not hide the results
        say("runner_quit_failed", "debug", error=exc)
    for w in workers:
        try:
            w.wait(timeout=10)  # they leave on the master's quit
        except subprocess.TimeoutExpired:
            processes.stop(w, grace_s=5)
