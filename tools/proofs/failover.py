"""``make failover``: the real router in front of simulator replicas, under load, through failures.

Why: on-call's worst night is a rollout or a crashed replica dropping users' requests. The pinned
sglang-router runs the command line the chart renders for it in front of ``qwen-npu sim`` replicas
(each with its sidecar) under ``qwen-npu bench``'s runner, through the scenarios of ``EVENTS``; the
router is $QWEN_NPU_ROUTER_BIN (``make router-venv``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from fixtures.tokenizer import build_tokenizer
from qwen_npu import processes
from tools import chart
from tools.paths import REPO
from tools.perf import report
from tools.perf.report import Metrics, parse_metrics, total
from tools.versions import read_versions

ROUTER_BIN_ENV = "QWEN_NPU_ROUTER_BIN"
DEFAULT_ROUTER_BIN = REPO / ".venv-router" / "bin" / "smg"


class FailoverError(RuntimeError):
    """A setup step failed; the message is one line naming it and the fix."""


@dataclass(frozen=True)
class Settings:
    """Timings and sizes of one run (the defaults are ``make failover``'s)."""

    replicas: int = 2
    concurrency: int = 10
    input_len: int = 128
    output_len: int = 64
    ttft_ms: float = 40.0
    itl_ms: float = 15.0
    # the router's health check: every interval, out after threshold misses of timeout each
    health_interval_s: int = 1
    failure_threshold: int = 2
    health_timeout_s: int = 1
    startup_delay_s: float = 4.0
    drain_check_s: float = 0.5
    warm_requests: int = 60  # completed through the router before the event
    tail_requests: int = 60  # completed after the event before the load stops
    num_prompts: int = 5000  # an upper bound: the load is stopped after the tail

    def eject_bound_s(self) -> float:
        """Longest time from a dead worker to the router leaving it out: interval x misses."""
        return float(self.health_interval_s * self.failure_threshold)

    def bound_for(self, scenario: str) -> float:
        """A hung worker's checks fail only at their timeout: misses x (interval + timeout)."""
        if scenario == "hang":
            return float(self.failure_threshold * (self.health_interval_s + self.health_timeout_s))
        return self.eject_bound_s()


def router_bin() -> Path:
    path = Path(os.environ.get(ROUTER_BIN_ENV) or DEFAULT_ROUTER_BIN)
    if not path.exists():
        raise FailoverError(
            f"the router is not installed at {path}; run `make router-venv` "
            f"(or set {ROUTER_BIN_ENV}=/path/to/smg)"
        )
    return path


def router_values(s: Settings, port: int, metrics_port: int) -> dict[str, Any]:
    """The chart values of this harness's router: its timings, ports and the simulated engines'
    drain limits (the chart checks the router's grace against the longest request)."""
    drain = {"maxOutputTokens": s.output_len, "worstTtftSeconds": 1, "worstTpotSeconds": 0.05}
    health = {"intervalSecs": s.health_interval_s, "timeoutSecs": s.health_timeout_s}
    health |= {"failureThreshold": s.failure_threshold, "successThreshold": 1}
    router = {
        "enabled": True,
        "policy": "cache_aware",
        "metricsPort": metrics_port,
        "requestTimeoutSecs": 120,
        "shutdownGracePeriodSecs": 5,
        "healthCheck": health,
        "retry": {"maxRetries": 3, "initialBackoffMs": 20, "maxBackoffMs": 500},
        "circuitBreaker": {"failureThreshold": 3, "timeoutDurationSecs": 30},
        # Harness only: the router polls a new worker's /health every second, not every 30.
        "extraArgs": ["--log-level", "warn", "--worker-startup-check-interval", "1"],
    }
    engine = {"drain": drain}
    return {"replicas": s.replicas, "service": {"port": port}, "engine": engine, "router": router}


def rendered_router_args(values: dict[str, Any]) -> list[str]:
    """The router container's args as the chart renders them for ``values``."""
    (deployment,) = chart.find(chart.render_docs(values), "Deployment", f"{chart.RELEASE}-router")
    return [str(a) for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]]


def local_router_args(args: list[str], workers: list[str], host: str = "127.0.0.1") -> list[str]:
    """The chart's router args for one machine: ``--worker-urls`` where the chart's Kubernetes
    service discovery flags stand, and the router and its metrics listening on ``host``."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--service-discovery":
            out += ["--worker-urls", *workers]
        elif arg == "--selector":  # its label=value pairs up to the next flag
            while i < len(args) and not args[i].startswith("--"):
                i += 1
        elif arg in ("--service-discovery-port", "--service-discovery-namespace"):
            i += 1
        elif arg in ("--host", "--prometheus-host"):
            out += [arg, host]
            i += 1
        else:
            out.append(arg)
    return out


def router_args(s: Settings, port: int, metrics_port: int, workers: list[str]) -> list[str]:
    """What the harness runs after ``smg launch``: the chart's render, made local."""
    return local_router_args(rendered_router_args(router_values(s, port, metrics_port)), workers)


def unknown_flags(args: list[str], help_text: str) -> list[str]:
    """The ``--flags`` of ``args`` that ``smg launch --help`` (``help_text``) does not list: a
    flag the pinned router rejects is one line before any traffic moves, not a failed start."""
    known = set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", help_text))
    return [a for a in args if a.startswith("--") and a.split("=", 1)[0] not in known]


def check_flags(args: list[str]) -> None:
    done = subprocess.run(
        [str(router_bin()), "launch", "--help"], capture_output=True, text=True, timeout=60
    )
    bad = unknown_flags(args, done.stdout)
    if done.returncode != 0 or bad:
        raise FailoverError(
            f"the installed router rejects {' '.join(bad) or 'launch --help'} "
            "(smg launch --help lists it not); fix the chart's qwen-npu.routerArgs "
            "(helm/qwen-npu/templates/_helpers.tpl) or SGLANG_ROUTER_VERSION in docker/versions.env"
        )


def get_json(url: str) -> Any:
    """GET ``url``'s JSON, None when it does not answer."""
    try:
        resp = httpx.get(url, timeout=2.0)
        return resp.json() if resp.is_success else None
    except (httpx.HTTPError, ValueError):
        return None


def call(method: str, url: str, body: Any = None) -> None:
    httpx.request(method, url, json=body, timeout=5.0).raise_for_status()


@dataclass
class Replica:
    """One simulator and its sidecar."""

    name: str
    port: int
    sidecar_port: int
    proc: subprocess.Popen[bytes]
    sidecar: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, Any]:
        got = get_json(self.url + "/sim/stats")
        return got if isinstance(got, dict) else {}


@dataclass
class Cluster:
    """Replicas and the router in front of them; everything started is stopped on close."""

    s: Settings
    workdir: Path
    replicas: list[Replica] = field(default_factory=list)
    gone: list[Replica] = field(default_factory=list)
    router: subprocess.Popen[bytes] | None = None
    router_port: int = 0
    metrics_port: int = 0

    @property
    def router_url(self) -> str:
        return f"http://127.0.0.1:{self.router_port}"

    def tokenizer_dir(self) -> Path:
        """A local tokenizer every replica reports as its model path, as an engine reports its
        checkpoint directory: the router then loads it from disk (the chart mounts the model
        volume in the router, router.mountModel) instead of asking the Hugging Face hub."""
        folder = self.workdir / "model"
        if not (folder / "tokenizer.json").exists():
            build_tokenizer(folder)
        return folder

    def start_replica(self, startup_delay_s: float = 0.0) -> Replica:
        n = len(self.replicas) + len(self.gone) + 1
        name, port, sport = f"r{n}", processes.free_port(), processes.free_port()
        log = self.workdir / f"sim-{name}.log"
        s = self.s
        cmd = [sys.executable, "-m", "qwen_npu", "sim", "--host", "127.0.0.1"]
        cmd += ["--port", str(port), "--ttft-ms", str(s.ttft_ms), "--itl-ms", str(s.itl_ms)]
        cmd += ["--health-check-poll-s", "0.02", "--startup-delay-s", str(startup_delay_s)]
        cmd += ["--seed", str(n), "--model-path", str(self.tokenizer_dir())]
        proc = processes.start(cmd, log=log, env={"QWEN_NPU_DRAIN_CHECK_S": str(s.drain_check_s)})
        scmd = [sys.executable, "-m", "qwen_npu", "sidecar", "--host", "127.0.0.1"]
        scmd += ["--port", str(sport), "--engine-url", f"http://127.0.0.1:{port}"]
        sidecar = processes.start(scmd, log=self.workdir / f"sidecar-{name}.log")
        rep = Replica(name, port, sport, proc, sidecar, log)
        self.replicas.append(rep)
        listening = functools.partial(processes.listening, port)
        processes.wait_until(listening, what=f"replica {name} listening", proc=proc, log=log)
        return rep

    def start_router(self) -> None:
        self.router_port, self.metrics_port = processes.free_port(), processes.free_port()
        workers = [r.url for r in self.replicas]
        args = router_args(self.s, self.router_port, self.metrics_port, workers)
        check_flags(args)
        log = self.workdir / "router.log"
        # The chart's router environment; the tokenizer itself comes from tokenizer_dir().
        cmd = [str(router_bin()), "launch", *args]
        self.router = processes.start(cmd, log=log, env={"HF_HUB_OFFLINE": "1"})
        n = len(self.replicas)
        processes.wait_until(
            lambda: (get_json(self.router_url + "/readiness") or {}).get("healthy_workers") == n,
            what=f"the router at {self.router_url} with {n} healthy workers",
            proc=self.router,
            log=log,
            timeout_s=120,
        )

    def workers(self) -> dict[str, dict[str, Any]]:
        got = get_json(self.router_url + "/workers") or {}
        return {w["url"]: w for w in got.get("workers", [])}

    def worker_healthy(self, rep: Replica) -> bool | None:
        """The router's view of ``rep``: None once it is not among its workers."""
        worker = self.workers().get(rep.url)
        return None if worker is None else worker.get("is_healthy") is True

    def router_metrics(self) -> Metrics:
        try:
            return parse_metrics(httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics").text)
        except httpx.HTTPError:
            return {}

    def close(self) -> None:
        if self.router is not None:
            processes.stop(self.router, grace_s=5)
        for rep in self.replicas + self.gone:
            processes.stop(rep.proc, grace_s=5)
            processes.stop(rep.sidecar, grace_s=5)


class Monitor:
    """Samples the router's per-worker counters every 50 ms (for "when did it stop sending")."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.samples: list[tuple[float, Metrics]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        arrived: dict[str, float] = {}  # the last count each replica gave (kept once it is gone)
        while not self._stop.is_set():
            m = self.cluster.router_metrics()
            for rep in list(self.cluster.replicas):
                if rep.proc.poll() is None and (st := rep.stats()):
                    arrived[rep.url] = float(st.get("requests_arrived", 0))
            for url, n in arrived.items():  # the replica's own count, as a series of the sample
                m[("sim_requests_arrived", (("worker", url),))] = n
            if m:
                self.samples.append((time.time(), m))
            self._stop.wait(0.05)

    @staticmethod
    def _sent(m: Metrics, url: str) -> float:
        """What reached ``url`` or was tried on it: the replica's own count of arrivals while
        it lives, plus the router's failed attempts (a dead worker fails at once, so they count
        when they were sent)."""
        arrived = m.get(("sim_requests_arrived", (("worker", url),)), 0.0)
        return arrived + total(m, "smg_worker_cb_outcomes_total", worker=url, outcome="failure")

    def _at(self, t: float | None) -> Metrics:
        """The last sample taken by wall time ``t`` (None: the last one); {} before any."""
        got = [m for ts, m in self.samples if t is None or ts <= t]
        return got[-1] if got else {}

    def requests(self) -> float:
        return total(self._at(None), "smg_router_requests_total")

    def last_send_to(self, url: str, until: float | None = None) -> float | None:
        """When the count of requests that reached ``url`` last grew (None: never sampled)."""
        last: float | None = None
        prev = -1.0
        for t, m in self.samples:
            if until is not None and t > until:
                break
            v = self._sent(m, url)
            if v > prev:
                if prev >= 0:
                    last = t
                prev = v
        return last

    def sends_to_after(self, url: str, after: float, until: float | None = None) -> float:
        """How many requests reached ``url`` after wall time ``after`` (and before ``until``)."""
        before, upto = self._at(after), self._at(until)
        return max(self._sent(upto, url) - self._sent(before, url), 0.0) if before else 0.0

    def retries_since(self, t0: float) -> float:
        name = "smg_worker_retries_total"
        return total(self._at(None), name) - total(self._at(t0), name)

    def wait_requests(self, n: float, what: str, proc: subprocess.Popen[bytes]) -> None:
        processes.wait_until(lambda: self.requests() >= n, what=what, proc=proc, timeout_s=300)


@contextlib.contextmanager
def load(cluster: Cluster, out: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``qwen-npu bench``'s runner through the router until stopped (SIGTERM keeps the records)."""
    s = cluster.s
    cmd = [sys.executable, "-m", "tools.proofs.failover", "load", str(out)]
    cmd += ["--target", cluster.router_url, "--concurrency", str(s.concurrency)]
    cmd += ["--num-prompts", str(s.num_prompts), "--input-len", str(s.input_len)]
    cmd += ["--output-len", str(s.output_len), "--range-ratio", "1.0", "--vocab-size", "1000"]
    proc = processes.start(cmd, log=out.with_suffix(".log"), cwd=REPO)
    try:
        yield proc
    finally:
        processes.stop(proc, grace_s=60)


def run_load(out: Path, bench_argv: list[str]) -> int:
    """The load child: run the bench's measured phase, write every request's record on exit."""
    # lazy: the bench's modules load locust, whose gevent patches the process: only for a run
    from qwen_npu.loadtest import cli as bench_cli
    from qwen_npu.loadtest import runner

    config = bench_cli.config_from_args(bench_cli.build_parser().parse_args(bench_argv))
    out.write_text(json.dumps([o.as_dict() for o in runner.run(config).outputs]))
    return 0


@dataclass
class Event:
    """What a scenario did: when, to which replica, and what it saw."""

    start: float = field(default_factory=time.time)
    end: float = 0.0
    bad_url: str | None = None
    in_flight_on_bad: int = 0
    #: The harness itself ended the bad replica here (the hang's liveness kill): what its stuck
    #: requests did afterwards is not the router's sending.
    measure_until: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)


def _replace(c: Cluster, old: Replica) -> tuple[int, float]:
    """``old`` replaced through the chart's drain sequence: its exit code and drain seconds."""
    new = c.start_replica()
    call("POST", c.router_url + "/workers", {"url": new.url})  # admitted once /health is 200
    processes.wait_until(
        lambda: c.worker_healthy(new), what=f"the router to admit {new.name}", timeout_s=120
    )
    ready = f"http://127.0.0.1:{new.sidecar_port}/readyz"
    processes.wait_http(ready, what=f"sidecar of {new.name} ready")
    # Readiness drops first: the router stops sending before the engine hears SIGTERM.
    worker = c.workers().get(old.url)
    if worker is not None:
        call("DELETE", c.router_url + f"/workers/{worker['id']}")
    processes.wait_until(
        lambda: c.worker_healthy(old) is None, what=f"the router to drop {old.name}"
    )
    t = time.monotonic()
    old.proc.send_signal(signal.SIGTERM)
    processes.wait_until(
        lambda: old.proc.poll() is not None, what=f"{old.name} to drain", timeout_s=300
    )
    drain_s = round(time.monotonic() - t, 2)
    processes.stop(old.sidecar, grace_s=10)  # the sidecar outlives the engine
    c.replicas.remove(old)
    c.gone.append(old)
    return int(old.proc.returncode), drain_s


def rolling(c: Cluster) -> Event:
    """Replace every replica, one at a time."""
    ev = Event()
    exits, drains = zip(*[_replace(c, old) for old in list(c.replicas)], strict=True)
    ev.end = time.time()
    before_ready = {r.name: r.stats().get("requests_before_ready") for r in c.replicas}
    ev.notes = {
        "exit_codes": list(exits),
        "drain_s": list(drains),
        "requests_before_ready": before_ready,
    }
    return ev


def _break_first(c: Cluster, how: Callable[[Replica], None], what: str) -> tuple[Event, Replica]:
    """``how`` done to the first replica, then the wait until the router ejects it."""
    bad = c.replicas[0]
    in_flight = int(bad.stats().get("requests_in_flight", 0))
    ev = Event(bad_url=bad.url)
    how(bad)
    ev.in_flight_on_bad = in_flight
    processes.wait_until(
        lambda: c.worker_healthy(bad) is not True,
        what=f"the router to eject the {what} replica",
        timeout_s=120,
    )
    ev.notes["ejected_after_s"] = round(time.time() - ev.start, 2)
    return ev, bad


def _sigkill(rep: Replica) -> None:
    rep.proc.send_signal(signal.SIGKILL)
    rep.proc.wait(timeout=30)


def kill(c: Cluster) -> Event:
    """SIGKILL one replica mid-run."""
    ev, _ = _break_first(c, _sigkill, "killed")
    ev.end = max(time.time(), ev.start + c.s.eject_bound_s())
    return ev


def hang(c: Cluster) -> Event:
    """One replica hangs; once ejected it is killed, as its liveness probe would have it."""
    faults = {"hang_generate": True, "hang_health": True}
    ev, bad = _break_first(c, lambda r: call("PATCH", r.url + "/sim/faults", faults), "hung")
    bound = ev.start + c.s.bound_for("hang")
    processes.wait_until(lambda: time.time() >= bound, what="bound")
    ev.notes["stuck_on_bad"] = int(bad.stats().get("requests_in_flight", 0))
    ev.measure_until = time.time()
    _sigkill(bad)  # the liveness restart ends its stuck streams
    ev.end = time.time()
    return ev


def loading(c: Cluster) -> Event:
    """A replica still loading joins serving ones; nothing may reach it before /health 200."""
    ev = Event()
    new = c.start_replica(startup_delay_s=c.s.startup_delay_s)
    ev.bad_url = new.url
    call("POST", c.router_url + "/workers", {"url": new.url})
    processes.wait_http(new.url + "/ready", what=f"{new.name} ready", proc=new.proc, timeout_s=120)
    processes.wait_until(
        lambda: int(new.stats().get("requests_arrived", 0)) > 0,
        what=f"the router to send to {new.name}",
        timeout_s=120,
    )
    ev.end = time.time()
    st = new.stats()
    ev.notes = {
        "requests_before_ready": int(st.get("requests_before_ready", -1)),
        "requests_after_ready": int(st.get("requests_arrived", 0)),
    }
    return ev


EVENTS: dict[str, Callable[[Cluster], Event]] = {
    f.__name__: f for f in (rolling, kill, hang, loading)
}
#: Each scenario's goal (issue 15) and whether a record meets it.
GOALS: dict[str, tuple[str, Callable[[dict[str, Any]], bool]]] = {
    "rolling": (
        "0 failed; every old replica drained and exited 0",
        lambda r: r["failed"] == 0 and all(c == 0 for c in r.get("exit_codes", [])),
    ),
    "kill": (
        "failed <= in flight on the killed replica; none sent to it after the bound",
        lambda r: r["failed"] <= r["in_flight_on_bad"] and r["sent_to_bad_after_bound"] == 0,
    ),
    "hang": (
        "out within the bound; nothing sent to it or lost after",
        lambda r: r["sent_to_bad_after_bound"] == 0 and r["failed_after_bound"] == 0,
    ),
    "loading": (
        "no request before its /health says 200; it serves after",
        lambda r: r.get("requests_before_ready") == 0 and r.get("requests_after_ready", 0) > 0,
    ),
}


def goal(rec: dict[str, Any]) -> tuple[str, bool]:
    text, met = GOALS[rec["scenario"]]
    return text, met(rec)


def p99_ms(values: list[float]) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, math.ceil(0.99 * len(v)) - 1)] * 1000, 1)


def run_scenario(name: str, s: Settings, workdir: Path) -> dict[str, Any]:
    """Run one scenario from scratch and return its record (one JSONL line)."""
    wd = workdir / name
    wd.mkdir(parents=True, exist_ok=True)
    c = Cluster(s, wd)
    bounded = name in ("kill", "hang")  # the scenarios with a replica the router must leave out
    try:
        for _ in range(s.replicas):
            c.start_replica()
        for rep in c.replicas:
            processes.wait_http(rep.url + "/health", what=f"replica {rep.name} /health 200",
                                proc=rep.proc, log=rep.log)  # fmt: skip
        c.start_router()
        raw = wd / "requests.json"
        with Monitor(c) as mon, load(c, raw) as lp:
            mon.wait_requests(s.warm_requests, "warm-up requests through the router", lp)
            ev = EVENTS[name](c)
            mon.wait_requests(mon.requests() + s.tail_requests, "requests after the event", lp)
            lp.send_signal(signal.SIGTERM)
            lp.wait(timeout=120)
            retried = mon.retries_since(ev.start - 0.1)
            (wd / "router-metrics.txt").write_text(
                "\n".join(f"{n}{dict(ls)} {v}" for (n, ls), v in sorted(mon.samples[-1][1].items()))
            )
            stopped, after_bound = None, 0.0
            if ev.bad_url and bounded:
                last_send = mon.last_send_to(ev.bad_url, ev.measure_until)
                stopped = None if last_send is None else round(max(last_send - ev.start, 0.0), 2)
                after = ev.start + s.bound_for(name)
                after_bound = mon.sends_to_after(ev.bad_url, after, ev.measure_until)
        if not raw.exists():
            raise FailoverError(f"the load wrote no records; see {raw.with_suffix('.log')}")
        outs = json.loads(raw.read_text())
    finally:
        c.close()
    failed = [o for o in outs if not o["success"]]
    before = [o["ttft"] for o in outs if o["success"] and o["start_time"] < ev.start]
    during = [o["ttft"] for o in outs if o["success"] and ev.start <= o["start_time"] <= ev.end]
    late_failures = [o for o in failed if o["start_time"] > ev.start + s.bound_for(name)]
    return {
        "scenario": name,
        "replicas": s.replicas,
        "concurrency": s.concurrency,
        "sent": len(outs),
        "failed": len(failed),
        "router_hub_requests": hub_requests(wd / "router.log"),
        "errors": dict(Counter(o["error"] for o in failed)),
        "retried_by_router": int(retried),
        "in_flight_on_bad": ev.in_flight_on_bad,
        "eject_bound_s": s.bound_for(name),
        "stopped_sending_after_s": stopped,
        "sent_to_bad_after_bound": int(after_bound),
        "failed_after_bound": len(late_failures),
        "event_s": round(ev.end - ev.start, 2),
        "p99_ttft_before_ms": p99_ms(before),
        "p99_ttft_during_ms": p99_ms(during),
        "requests_during": len(during),
        **ev.notes,
        "settings": asdict(s),
    }


#: What sglang-router 0.3.2 logs when it asks the hub for a tokenizer (one line per attempt).
_HUB = re.compile(r"huggingface\.co|from HuggingFace", re.IGNORECASE)


def hub_requests(router_log: Path) -> int:
    """Lines of the router's log that show a request to the Hugging Face hub."""
    if not router_log.exists():
        return 0
    return sum(1 for ln in router_log.read_text(errors="replace").splitlines() if _HUB.search(ln))


def _dash(v: Any) -> str:
    return "-" if v is None else str(v)


def write_report(records: list[dict[str, Any]], md: Path) -> None:
    s = records[0]["settings"] if records else {}
    lines = [
        "# Failover: the router in front of simulator replicas under load",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `make failover` "
        "(tools/proofs/failover.py): sglang-router "
        f"{read_versions().get('SGLANG_ROUTER_VERSION', '?')}, {s.get('replicas')} simulator "
        f"replicas each with its sidecar, `qwen-npu bench`'s runner at CONC {s.get('concurrency')} "
        f"({s.get('input_len')} in / {s.get('output_len')} out, streaming /generate; simulator "
        f"TTFT {s.get('ttft_ms')} ms, ITL {s.get('itl_ms')} ms). Router health check every "
        f"{s.get('health_interval_s')} s, {s.get('failure_threshold')} misses to eject, "
        f"{s.get('health_timeout_s')} s timeout: the bound is interval x misses, and misses x "
        "(interval + timeout) for a hung worker, whose checks fail only at their timeout.",
        "",
        "| scenario | sent | failed | retried by router | in flight on bad | stopped sending"
        " after s | ejected after s | bound s | sent to bad after bound | p99 TTFT before ms"
        " | p99 TTFT during ms | goal | met |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for rec in records:
        text, ok = goal(rec)
        lines.append(
            f"| {rec['scenario']} | {rec['sent']} | {rec['failed']} | {rec['retried_by_router']} "
            f"| {rec['in_flight_on_bad']} | {_dash(rec['stopped_sending_after_s'])} "
            f"| {_dash(rec.get('ejected_after_s'))} | {rec['eject_bound_s']} "
            f"| {rec['sent_to_bad_after_bound']} | {_dash(rec['p99_ttft_before_ms'])} "
            f"| {_dash(rec['p99_ttft_during_ms'])} | {text} | {'yes' if ok else 'NO'} |"
        )
    lines += [
        "",
        "Per scenario (errors by reason, drain times, exit codes, counts per replica):",
        "",
    ]
    for rec in records:
        extra = {k: v for k, v in rec.items() if k != "settings"}
        lines.append(f"- `{rec['scenario']}`: `{json.dumps(extra, sort_keys=True)}`")
    report.write_report(md, [*lines, ""])
    md.with_suffix(".jsonl").write_text(
        "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["load"]:  # the load child, started by load() above: load OUT BENCH-FLAGS...
        return run_load(Path(argv[1]), argv[2:])
    p = argparse.ArgumentParser(prog="make failover", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="out/perf/failover.md")
    p.add_argument("--scenario", action="append", choices=list(EVENTS), help="default: all four")
    p.add_argument("--workdir", default="out/failover", help="logs of every process")
    args = p.parse_args(argv)
    records = []
    try:
        for name in args.scenario or EVENTS:
            print(f"failover: scenario {name} ...", flush=True)
            rec = run_scenario(name, Settings(), Path(args.workdir))
            text, ok = goal(rec)
            print(
                f"failover: {name}: sent={rec['sent']} failed={rec['failed']} "
                f"retried={rec['retried_by_router']} goal met={ok} ({text})",
                flush=True,
            )
            records.append(rec)
    except (FailoverError, processes.WaitTimeout, processes.ProcessExited) as exc:
        print(f"failover: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    write_report(records, Path(args.out))
    print(f"failover: wrote {args.out} and {Path(args.out).with_suffix('.jsonl')}")
    return 0 if all(goal(r)[1] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
