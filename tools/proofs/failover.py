"""``make failover``: the real router in front of simulator replicas, under load, through failures.

Why this exists: on-call's worst night is a rollout or a crashed replica dropping users' requests.
This harness proves what the router (sglang-router, pinned in docker/versions.env, with the
command line the chart renders for it: ``router_args``) does with ``qwen-npu sim`` replicas, each
with its ``qwen-npu sidecar``, while ``qwen-npu bench``'s runner sends CONC closed-loop streaming
requests through it. Scenarios:

- ``rolling``: every replica replaced through the chart's drain sequence: a new replica starts and
  the router admits it only once its /health says 200; the old one leaves the router first (what
  its readiness dropping does with service discovery), then gets SIGTERM, drains and exits 0.
- ``kill``: SIGKILL of one replica mid-run.
- ``hang``: one replica hangs (PATCH /sim/faults hang_generate + hang_health); once the router has
  ejected it, it is killed (what its liveness probe does), which ends its stuck streams.
- ``loading``: a replica still loading (startup-delay-s) is added beside serving ones.

For each: requests sent and failed (the load's own records), retried by the router (its
Prometheus counter smg_worker_retries_total), the time until the router stopped sending to the bad
replica (its per-worker outcome counters, sampled), p99 TTFT during the event against before it.
Written to out/perf/failover.md and out/perf/failover.jsonl. The router is found at
$QWEN_NPU_ROUTER_BIN (``make router-venv`` puts it in .venv-router/bin/smg). Not shipped: tooling
like tools/chart/, run by ``make failover`` and tests/proofs.
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
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fixtures.tokenizer import build_tokenizer
from qwen_npu import processes
from tools import chart
from tools.paths import REPO
from tools.versions import read_versions

ROOT = REPO
ROUTER_BIN_ENV = "QWEN_NPU_ROUTER_BIN"
DEFAULT_ROUTER_BIN = ROOT / ".venv-router" / "bin" / "smg"
SCENARIOS = ("rolling", "kill", "hang", "loading")


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
    health_interval_s: int = 1
    failure_threshold: int = 2
    health_timeout_s: int = 1
    startup_delay_s: float = 4.0
    drain_check_s: float = 0.5
    warm_requests: int = 60  # completed through the router before the event
    tail_requests: int = 60  # completed after the event before the load stops
    policy: str = "cache_aware"
    num_prompts: int = 5000  # an upper bound: the load is stopped after the tail

    def eject_bound_s(self) -> float:
        """Longest time from a dead worker to the router leaving it out: interval x misses."""
        return float(self.health_interval_s * self.failure_threshold)

    def hang_bound_s(self) -> float:
        """A hung worker's checks fail only at their timeout: misses x (interval + timeout)."""
        return float(self.failure_threshold * (self.health_interval_s + self.health_timeout_s))

    def bound_for(self, scenario: str) -> float:
        return self.hang_bound_s() if scenario == "hang" else self.eject_bound_s()


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
    return {
        "replicas": s.replicas,
        "service": {"port": port},
        "engine": {
            "drain": {
                "maxOutputTokens": s.output_len,
                "worstTtftSeconds": 1,
                "worstTpotSeconds": 0.05,
            }
        },
        "router": {
            "enabled": True,
            "policy": s.policy,
            "metricsPort": metrics_port,
            "requestTimeoutSecs": 120,
            "shutdownGracePeriodSecs": 5,
            "healthCheck": {
                "intervalSecs": s.health_interval_s,
                "failureThreshold": s.failure_threshold,
                "successThreshold": 1,
                "timeoutSecs": s.health_timeout_s,
            },
            "retry": {"maxRetries": 3, "initialBackoffMs": 20, "maxBackoffMs": 500},
            "circuitBreaker": {"failureThreshold": 3, "timeoutDurationSecs": 30},
            # Harness only: the router polls a new worker's /health every second, not every 30.
            "extraArgs": ["--log-level", "warn", "--worker-startup-check-interval", "1"],
        },
    }


def rendered_router_args(values: dict[str, Any]) -> list[str]:
    """The router container's args as the chart renders them for ``values``."""
    docs = chart.render_docs(values)
    (deployment,) = chart.find(docs, "Deployment", f"{chart.RELEASE}-router")
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
    """The ``--flags`` of ``args`` that ``smg launch --help`` (``help_text``) does not list.

    A router flag the pinned router rejects would only show when the router starts; checking
    the flags against its help first turns that into one line before any traffic moves.
    """
    known = set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", help_text))
    return [a for a in args if a.startswith("--") and a.split("=", 1)[0] not in known]


def check_flags(args: list[str]) -> None:
    """Every flag of ``args`` is one the installed router lists in ``smg launch --help``."""
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


# -- small HTTP helpers -----------------------------------------------------------------------


def http_json(method: str, url: str, body: Any = None, timeout: float = 5.0) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def try_json(method: str, url: str, body: Any = None, timeout: float = 2.0) -> Any:
    try:
        return http_json(method, url, body, timeout)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text as {(name, sorted labels): value}."""
    # lazy: an extra's (pyproject.toml); the base install goes without
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


# -- the processes ----------------------------------------------------------------------------


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

    def stats(self) -> dict[str, Any] | None:
        got = try_json("GET", self.url + "/sim/stats")
        return got if isinstance(got, dict) else None

    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class Cluster:
    """Replicas and the router in front of them; everything started is stopped on exit."""

    s: Settings
    workdir: Path
    replicas: list[Replica] = field(default_factory=list)
    gone: list[Replica] = field(default_factory=list)
    router: subprocess.Popen[bytes] | None = None
    router_port: int = 0
    metrics_port: int = 0
    _n: int = 0

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
        self._n += 1
        name = f"r{self._n}"
        port, sport = processes.free_port(), processes.free_port()
        log = self.workdir / f"sim-{name}.log"
        s = self.s
        cmd = [sys.executable, "-m", "qwen_npu", "sim", "--host", "127.0.0.1"]
        cmd += ["--port", str(port), "--ttft-ms", str(s.ttft_ms), "--itl-ms", str(s.itl_ms)]
        cmd += ["--health-check-poll-s", "0.02", "--startup-delay-s", str(startup_delay_s)]
        cmd += ["--seed", str(self._n), "--model-path", str(self.tokenizer_dir())]
        proc = processes.start(cmd, log=log, env={"QWEN_NPU_DRAIN_CHECK_S": str(s.drain_check_s)})
        scmd = [sys.executable, "-m", "qwen_npu", "sidecar", "--host", "127.0.0.1"]
        scmd += ["--port", str(sport), "--engine-url", f"http://127.0.0.1:{port}"]
        sidecar = processes.start(scmd, log=self.workdir / f"sidecar-{name}.log")
        rep = Replica(name, port, sport, proc, sidecar, log)
        self.replicas.append(rep)
        processes.wait_until(
            lambda: processes.listening(port), what=f"replica {name} listening", proc=proc, log=log
        )
        return rep

    def wait_serving(self, rep: Replica) -> None:
        processes.wait_http(rep.url + "/health", what=f"replica {rep.name} /health 200",
                            proc=rep.proc, log=rep.log)  # fmt: skip

    def start_router(self) -> None:
        self.router_port, self.metrics_port = processes.free_port(), processes.free_port()
        workers = [r.url for r in self.replicas]
        args = router_args(self.s, self.router_port, self.metrics_port, workers)
        check_flags(args)
        cmd = [str(router_bin()), "launch", *args]
        log = self.workdir / "router.log"
        # The chart's router environment; the tokenizer itself comes from tokenizer_dir().
        self.router = processes.start(cmd, log=log, env={"HF_HUB_OFFLINE": "1"})
        n = len(self.replicas)
        processes.wait_until(
            lambda: (
                (try_json("GET", self.router_url + "/readiness") or {}).get("healthy_workers") == n
            ),
            what=f"the router at {self.router_url} with {n} healthy workers",
            proc=self.router,
            log=log,
            timeout_s=120,
        )

    def workers(self) -> dict[str, dict[str, Any]]:
        got = try_json("GET", self.router_url + "/workers") or {}
        return {w["url"]: w for w in got.get("workers", [])}

    def add_worker(self, rep: Replica) -> None:
        http_json("POST", self.router_url + "/workers", {"url": rep.url})

    def remove_worker(self, rep: Replica) -> None:
        w = self.workers().get(rep.url)
        if w is not None:
            http_json("DELETE", self.router_url + f"/workers/{w['id']}")

    def router_metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
            ) as resp:
                return parse_metrics(resp.read().decode())
        except (urllib.error.URLError, OSError):
            return {}

    def retire(self, rep: Replica) -> None:
        self.replicas.remove(rep)
        self.gone.append(rep)

    def close(self) -> None:
        if self.router is not None:
            processes.stop(self.router, grace_s=5)
        for rep in self.replicas + self.gone:
            processes.stop(rep.proc, grace_s=5)
            processes.stop(rep.sidecar, grace_s=5)


def total(
    m: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """The sum of ``name``'s series whose labels include ``labels``."""
    return sum(
        v
        for (n, ls), v in m.items()
        if n == name and all(dict(ls).get(k) == want for k, want in labels.items())
    )


class Monitor:
    """Samples the router's per-worker counters every 50 ms (for "when did it stop sending")."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.samples: list[tuple[float, dict[tuple[str, tuple[tuple[str, str], ...]], float]]] = []
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
                st = rep.stats() if rep.alive() else None
                if st is not None:
                    arrived[rep.url] = float(st.get("requests_arrived", 0))
            for url, n in arrived.items():  # the replica's own count, as a series of the sample
                m[("sim_requests_arrived", (("worker", url),))] = n
            if m:
                self.samples.append((time.time(), m))
            self._stop.wait(0.05)

    @staticmethod
    def _sent(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], url: str) -> float:
        """What reached ``url`` or was tried on it: the replica's own count of arrivals while
        it lives, plus the router's failed attempts (a dead worker fails at once, so they count
        when they were sent)."""
        arrived = m.get(("sim_requests_arrived", (("worker", url),)), 0.0)
        return arrived + total(m, "smg_worker_cb_outcomes_total", worker=url, outcome="failure")

    def requests(self) -> float:
        m = self.samples[-1][1] if self.samples else {}
        return total(m, "smg_router_requests_total")

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
        before = [m for t, m in self.samples if t <= after]
        upto = [m for t, m in self.samples if until is None or t <= until]
        if not before or not upto:
            return 0.0
        return max(self._sent(upto[-1], url) - self._sent(before[-1], url), 0.0)

    def retries_between(self, t0: float, t1: float | None = None) -> float:
        a = [m for t, m in self.samples if t <= t0]
        b = [m for t, m in self.samples if t1 is None or t <= t1]
        if not b:
            return 0.0
        start = total(a[-1], "smg_worker_retries_total") if a else 0.0
        return total(b[-1], "smg_worker_retries_total") - start

    def wait_requests(self, n: float, what: str, proc: subprocess.Popen[bytes]) -> None:
        processes.wait_until(lambda: self.requests() >= n, what=what, proc=proc, timeout_s=300)


# -- the load -----------------------------------------------------------------------------------


@contextlib.contextmanager
def load(cluster: Cluster, out: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``qwen-npu bench``'s runner through the router until stopped (SIGTERM keeps the records)."""
    s = cluster.s
    cmd = [sys.executable, "-m", "tools.proofs.failover", "load", "--out", str(out), "--"]
    cmd += ["--target", cluster.router_url, "--concurrency", str(s.concurrency)]
    cmd += ["--num-prompts", str(s.num_prompts), "--input-len", str(s.input_len)]
    cmd += ["--output-len", str(s.output_len), "--range-ratio", "1.0", "--vocab-size", "1000"]
    proc = processes.start(cmd, log=out.with_suffix(".log"), cwd=ROOT)
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
    result = runner.run(config)
    out.write_text(json.dumps([o.as_dict() for o in result.outputs]))
    return 0


# -- the scenarios --------------------------------------------------------------------------------


@dataclass
class Event:
    """What a scenario did: when, to which replica, and what it saw."""

    start: float = 0.0
    end: float = 0.0
    bad_url: str | None = None
    in_flight_on_bad: int = 0
    #: The harness itself ended the bad replica here (the hang's liveness kill): what its stuck
    #: requests did afterwards is not the router's sending.
    measure_until: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)


def _admitted(c: Cluster, rep: Replica) -> bool:
    return (c.workers().get(rep.url) or {}).get("is_healthy") is True


def _dropped(c: Cluster, rep: Replica) -> bool:
    return rep.url not in c.workers()


def _exited(rep: Replica) -> bool:
    return rep.proc.poll() is not None


def rolling(c: Cluster, mon: Monitor) -> Event:
    """Replace every replica through the chart's drain sequence, one at a time."""
    ev = Event(start=time.time())
    exits: list[int] = []
    drains: list[float] = []
    for old in list(c.replicas):
        new = c.start_replica()
        c.add_worker(new)  # the router admits it only once its /health says 200
        processes.wait_until(
            functools.partial(_admitted, c, new),
            what=f"the router to admit {new.name}",
            timeout_s=120,
        )
        processes.wait_http(
            f"http://127.0.0.1:{new.sidecar_port}/readyz", what=f"sidecar of {new.name} ready"
        )
        # Readiness drops first: the router stops sending before the engine hears SIGTERM.
        c.remove_worker(old)
        processes.wait_until(
            functools.partial(_dropped, c, old), what=f"the router to drop {old.name}"
        )
        t = time.monotonic()
        old.proc.send_signal(signal.SIGTERM)
        processes.wait_until(
            functools.partial(_exited, old), what=f"{old.name} to drain", timeout_s=300
        )
        drains.append(time.monotonic() - t)
        exits.append(int(old.proc.returncode))
        processes.stop(old.sidecar, grace_s=10)  # the sidecar outlives the engine
        c.retire(old)
    ev.end = time.time()
    ev.notes = {
        "exit_codes": exits,
        "drain_s": [round(d, 2) for d in drains],
        "requests_before_ready": {r.name: (r.stats() or {}).get("requests_before_ready")
                                  for r in c.replicas},
    }  # fmt: skip
    return ev


def kill(c: Cluster, mon: Monitor) -> Event:
    """SIGKILL one replica mid-run."""
    bad = c.replicas[0]
    stats = bad.stats() or {}
    ev = Event(start=time.time(), bad_url=bad.url)
    bad.proc.send_signal(signal.SIGKILL)
    ev.in_flight_on_bad = int(stats.get("requests_in_flight", 0))
    bad.proc.wait(timeout=30)
    processes.wait_until(
        lambda: (
            (c.workers().get(bad.url) or {}).get("is_healthy") is False
            or bad.url not in c.workers()
        ),
        what="the router to eject the killed replica",
        timeout_s=120,
    )
    ev.notes["ejected_after_s"] = round(time.time() - ev.start, 2)
    ev.end = max(time.time(), ev.start + c.s.eject_bound_s())
    return ev


def hang(c: Cluster, mon: Monitor) -> Event:
    """One replica hangs; once ejected it is killed, as its liveness probe would have it."""
    bad = c.replicas[0]
    stats = bad.stats() or {}
    ev = Event(start=time.time(), bad_url=bad.url)
    http_json("PATCH", bad.url + "/sim/faults", {"hang_generate": True, "hang_health": True})
    ev.in_flight_on_bad = int(stats.get("requests_in_flight", 0))
    processes.wait_until(
        lambda: (c.workers().get(bad.url) or {}).get("is_healthy") is False,
        what="the router to eject the hung replica",
        timeout_s=120,
    )
    ev.notes["ejected_after_s"] = round(time.time() - ev.start, 2)
    processes.wait_until(lambda: time.time() >= ev.start + c.s.hang_bound_s(), what="bound")
    after = bad.stats() or {}
    ev.notes["stuck_on_bad"] = int(after.get("requests_in_flight", 0))
    ev.measure_until = time.time()
    bad.proc.send_signal(signal.SIGKILL)  # the liveness restart ends its stuck streams
    bad.proc.wait(timeout=30)
    ev.end = time.time()
    return ev


def loading(c: Cluster, mon: Monitor) -> Event:
    """A replica still loading joins serving ones; nothing may reach it before /health 200."""
    ev = Event(start=time.time())
    new = c.start_replica(startup_delay_s=c.s.startup_delay_s)
    ev.bad_url = new.url
    c.add_worker(new)
    processes.wait_http(new.url + "/ready", what=f"{new.name} ready", proc=new.proc, timeout_s=120)
    processes.wait_until(
        lambda: int((new.stats() or {}).get("requests_arrived", 0)) > 0,
        what=f"the router to send to {new.name}",
        timeout_s=120,
    )
    ev.end = time.time()
    st = new.stats() or {}
    ev.notes = {
        "requests_before_ready": int(st.get("requests_before_ready", -1)),
        "requests_after_ready": int(st.get("requests_arrived", 0)),
    }
    return ev


EVENTS: dict[str, Callable[[Cluster, Monitor], Event]] = {
    "rolling": rolling,
    "kill": kill,
    "hang": hang,
    "loading": loading,
}


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, math.ceil(0.99 * len(v)) - 1)]


def run_scenario(name: str, s: Settings, workdir: Path) -> dict[str, Any]:
    """Run one scenario from scratch and return its record (one JSONL line)."""
    wd = workdir / name
    wd.mkdir(parents=True, exist_ok=True)
    c = Cluster(s, wd)
    try:
        for _ in range(s.replicas):
            c.start_replica()
        for rep in c.replicas:
            c.wait_serving(rep)
        c.start_router()
        raw = wd / "requests.json"
        with Monitor(c) as mon, load(c, raw) as lp:
            mon.wait_requests(s.warm_requests, "warm-up requests through the router", lp)
            ev = EVENTS[name](c, mon)
            at_end = mon.requests()
            mon.wait_requests(at_end + s.tail_requests, "requests after the event", lp)
            lp.send_signal(signal.SIGTERM)
            lp.wait(timeout=120)
            retried = mon.retries_between(ev.start - 0.1)
            (wd / "router-metrics.txt").write_text(
                "\n".join(f"{n}{dict(ls)} {v}" for (n, ls), v in sorted(mon.samples[-1][1].items()))
            )
            last_send = mon.last_send_to(ev.bad_url, ev.measure_until) if ev.bad_url else None
            after_bound = (
                mon.sends_to_after(ev.bad_url, ev.start + s.bound_for(name), ev.measure_until)
                if ev.bad_url and name in ("kill", "hang")
                else 0.0
            )
        if not raw.exists():
            raise FailoverError(f"the load wrote no records; see {raw.with_suffix('.log')}")
        outs = json.loads(raw.read_text())
    finally:
        c.close()
    failed = [o for o in outs if not o["success"]]
    before = [o["ttft"] for o in outs if o["success"] and o["start_time"] < ev.start]
    during = [o["ttft"] for o in outs if o["success"] and ev.start <= o["start_time"] <= ev.end]
    late_failures = [o for o in failed if o["start_time"] > ev.start + s.bound_for(name)]
    errors: dict[str, int] = {}
    for o in failed:
        errors[o["error"]] = errors.get(o["error"], 0) + 1
    stopped = None
    if last_send is not None and name in ("kill", "hang"):
        stopped = round(max(last_send - ev.start, 0.0), 2)
    return {
        "scenario": name,
        "replicas": s.replicas,
        "concurrency": s.concurrency,
        "sent": len(outs),
        "failed": len(failed),
        "router_hub_requests": hub_requests(wd / "router.log"),
        "errors": errors,
        "retried_by_router": int(retried),
        "in_flight_on_bad": ev.in_flight_on_bad,
        "eject_bound_s": s.bound_for(name),
        "stopped_sending_after_s": stopped,
        "sent_to_bad_after_bound": int(after_bound),
        "failed_after_bound": len(late_failures),
        "event_s": round(ev.end - ev.start, 2),
        "p99_ttft_before_ms": _ms(p99(before)),
        "p99_ttft_during_ms": _ms(p99(during)),
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
    return sum(
        1 for line in router_log.read_text(errors="replace").splitlines() if _HUB.search(line)
    )


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 1)


def goal(rec: dict[str, Any]) -> tuple[str, bool]:
    """The scenario's goal (issue 15) and whether the record meets it."""
    name = rec["scenario"]
    if name == "rolling":
        ok = rec["failed"] == 0 and all(c == 0 for c in rec.get("exit_codes", []))
        return "0 failed; every old replica drained and exited 0", ok
    if name == "kill":
        ok = rec["failed"] <= rec["in_flight_on_bad"] and rec["sent_to_bad_after_bound"] == 0
        return "failed <= in flight on the killed replica; none sent to it after the bound", ok
    if name == "hang":
        ok = rec["sent_to_bad_after_bound"] == 0 and rec["failed_after_bound"] == 0
        return "out within the bound; nothing sent to it or lost after", ok
    ok = rec.get("requests_before_ready") == 0 and rec.get("requests_after_ready", 0) > 0
    return "no request before its /health says 200; it serves after", ok


def write_report(records: list[dict[str, Any]], md: Path) -> None:
    md.parent.mkdir(parents=True, exist_ok=True)
    with md.with_suffix(".jsonl").open("w") as f:
        for rec in records:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
    s = records[0]["settings"] if records else {}
    lines = [
        "# Failover: the router in front of simulator replicas under load",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `make failover` "
        "(tools/proofs/failover.py): sglang-router "
        f"{read_versions().get('SGLANG_ROUTER_VERSION', '?')}, "
        f"{s.get('replicas')} "
        f"simulator replicas each with its sidecar, `qwen-npu bench`'s runner at CONC "
        f"{s.get('concurrency')} ({s.get('input_len')} in / {s.get('output_len')} out, streaming "
        f"/generate; simulator TTFT {s.get('ttft_ms')} ms, ITL {s.get('itl_ms')} ms). Router "
        f"health check every {s.get('health_interval_s')} s, {s.get('failure_threshold')} misses "
        f"to eject, {s.get('health_timeout_s')} s timeout: the bound is interval x misses, and "
        "misses x (interval + timeout) for a hung worker, whose checks fail only at their "
        "timeout.",
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
        extra = {k: v for k, v in rec.items() if k not in ("settings",)}
        lines.append(f"- `{rec['scenario']}`: `{json.dumps(extra, sort_keys=True)}`")
    md.write_text("\n".join(lines) + "\n")


def _dash(v: Any) -> str:
    return "-" if v is None else str(v)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["load"]:
        lp = argparse.ArgumentParser(prog="tools.proofs.failover load")
        lp.add_argument("--out", required=True)
        lp.add_argument("bench", nargs=argparse.REMAINDER)
        la = lp.parse_args(argv[1:])
        bench = la.bench[1:] if la.bench[:1] == ["--"] else la.bench
        return run_load(Path(la.out), bench)
    p = argparse.ArgumentParser(prog="make failover", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="out/perf/failover.md")
    p.add_argument("--scenario", action="append", choices=SCENARIOS, help="default: all four")
    p.add_argument("--workdir", default="out/failover", help="logs of every process")
    args = p.parse_args(argv)
    s = Settings()
    records = []
    try:
        for name in args.scenario or SCENARIOS:
            print(f"failover: scenario {name} ...", flush=True)
            rec = run_scenario(name, s, Path(args.workdir))
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
