"""The live half of the autoscaling proof (``make autoscaling``): real Prometheus scraping two
simulator replicas under the ServiceMonitor's labels, loaded by ``qwen-npu bench`` phase by phase.
Every poll waits for events (fresh scrapes, the load queued, the queue drained), never for a fixed
time; the rendered trigger queries' answers feed ``Hpa`` at virtual KEDA poll times
(``pollingInterval`` apart, so production-sized windows need no real minutes).
"""

from __future__ import annotations

import contextlib
import functools
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from qwen_npu import processes
from qwen_npu.sim.testing import running_sim
from tools import chart
from tools.paths import OUT
from tools.perf.report import write_report
from tools.proofs.autoscaling_model import PHASES, PROOF_VALUES, Hpa, Row, Scaler, table

MAX_RUNNING = 2
SIM: dict[str, Any] = {"max_running_requests": MAX_RUNNING, "ttft_ms": 50, "itl_ms": 5}
BENCH = ["--input-len", "32", "--output-len", "64", "--no-warmup", "--ramp-ms-per-user", "0"]
#: The service and namespace the rendered queries select (tools/chart/'s release).
SERVICE = f"{chart.RELEASE}-engine"


def rendered_scaler(values: dict[str, Any] | None = None) -> tuple[Scaler, dict[str, Any]]:
    docs = chart.render_docs(values or PROOF_VALUES)
    (doc,) = chart.find(docs, "ScaledObject")
    return Scaler.from_scaled_object(doc), doc


def _scrape_times(prom: str) -> list[float] | None:
    targets = httpx.get(f"{prom}/api/v1/targets", timeout=10.0).json()["data"]["activeTargets"]
    if len(targets) < 2 or any(t["health"] != "up" for t in targets):
        return None
    return [datetime.fromisoformat(t["lastScrape"][:26] + "+00:00").timestamp() for t in targets]


def _query(prom: str, expr: str) -> float | None:
    body = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10.0).json()
    result = body["data"]["result"]
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if math.isnan(value) else value


@contextlib.contextmanager
def _prometheus(work: Path, targets: list[str]) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is not installed: run `make tools-prometheus`")
    port = processes.free_port()
    labels = {"namespace": chart.NAMESPACE, "service": SERVICE}  # the ServiceMonitor's
    static = [
        {"targets": [target], "labels": {**labels, "pod": f"{SERVICE}-{i}"}}
        for i, target in enumerate(targets)
    ]
    cfg = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": SERVICE, "static_configs": static}],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    cmd = [binary, f"--config.file={work / 'prometheus.yml'}", "--log.level=warn"]
    cmd += [f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"]
    prom = f"http://127.0.0.1:{port}"
    with processes.running(
        cmd, log=work / "prometheus.log", ready_url=f"{prom}/-/ready", what="prometheus"
    ):
        processes.wait_until(lambda: _scrape_times(prom), what="both replicas scraped")
        yield prom


def _bench(
    work: Path, url: str, concurrency: int, prompts: int, tag: str
) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "qwen_npu", "bench", "--target", url,
        "--concurrency", str(concurrency), "--num-prompts", str(prompts), *BENCH,
        "--output", str(work / f"bench-{tag}.jsonl"),
    ]  # fmt: skip
    return processes.start(cmd, log=work / f"bench-{tag}.log", new_session=True)


def _queued_since(prom: str, query: str, started: float) -> bool:
    """Both replicas scraped after ``started``, and the queue the scaler reads above 0."""
    times = _scrape_times(prom)
    return bool(times) and min(times or [0.0]) > started and (_query(prom, query) or 0) > 0


def _wait_zero(prom: str, query: str, phase: str) -> None:
    what = f"{phase}: {query} back to 0"  # 0, or no series
    processes.wait_until(lambda: not _query(prom, query), what=what, timeout_s=120)


def _next_scrape(prom: str, after: float, phase: str) -> float:
    """Wait until both replicas were scraped after ``after``; the latest scrape time."""

    def fresh() -> float:
        times = _scrape_times(prom)
        return max(times) if times and min(times) > after else 0.0

    return processes.wait_until(fresh, what=f"{phase}: fresh scrapes")


def run_proof(work: Path) -> tuple[list[Row], Scaler]:
    """Drive ``PHASES`` and return one row per KEDA poll, with the scaler the chart rendered."""
    work.mkdir(parents=True, exist_ok=True)
    scaler, _ = rendered_scaler()
    queries = {t.name: t.query for t in scaler.triggers}
    hpa = Hpa(scaler, replicas=scaler.min_replicas)
    rows: list[Row] = []
    with running_sim(**SIM) as a, running_sim(**SIM) as b:
        urls = [a, b]
        with _prometheus(work, [u.removeprefix("http://") for u in urls]) as prom:
            polled = max(_scrape_times(prom) or [time.time()])
            now = 0.0
            for index, (phase, conc, polls) in enumerate(PHASES):
                benches: list[subprocess.Popen[bytes]] = []
                if conc:
                    # A spike is one wave of requests; any other load lasts the whole phase.
                    prompts = conc if phase == "spike" else 100_000
                    started = time.time()
                    benches = [
                        _bench(work, url, conc, prompts, f"{index}-{i}")
                        for i, url in enumerate(urls)
                    ]
                    if conc > MAX_RUNNING:  # more users than slots: a queue
                        # Seen in scrapes taken after these benches started: Prometheus still
                        # holds the previous phase's queue until both replicas are scraped again,
                        # and a loaded machine can take seconds to start a bench.
                        processes.wait_until(
                            functools.partial(_queued_since, prom, queries["queue"], started),
                            what=f"{phase}: the load queued",
                            timeout_s=120,
                        )
                else:
                    for query in queries.values():  # the queue and the TTFT window drained
                        _wait_zero(prom, query, phase)
                for _ in range(polls):
                    polled = _next_scrape(prom, polled, phase)
                    values = {name: _query(prom, q) for name, q in queries.items()}
                    now += scaler.polling_s
                    rows.append(Row(phase, conc, now, values, hpa.step(now, values)))
                for proc in benches:
                    processes.stop(proc)
    return rows, scaler


def main() -> int:
    """`make autoscaling`: run the live proof and write its table to out/perf/autoscaling.md."""
    rows, scaler = run_proof(OUT / "perf" / "autoscaling-work")
    title = "# KEDA's decisions on the engine's own signals (make autoscaling)"
    return write_report(
        OUT / "perf" / "autoscaling.md", [title, "", f"Scaler: {scaler}", "", table(rows, scaler)]
    )


if __name__ == "__main__":
    raise SystemExit(main())
