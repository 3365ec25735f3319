"""``make perf-sidecar``: the real sidecar process (uvicorn, as in the pod) against the simulator:
probe and scrape latency in an open loop (requests leave on schedule; ``/metrics`` at 100 times a
Prometheus pair's rate), then the RSS over hours of scrapes with the poll loops sped up.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from qwen_npu import processes
from qwen_npu.processes import free_port
from qwen_npu.sim.testing import running_sim
from tools.perf.report import run

GOAL_P99_MS = 5.0
GOAL_RSS_MB = 80.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


@contextmanager
def sidecar_process(engine_url: str, env_extra: dict[str, str]) -> Iterator[tuple[str, int]]:
    """The real sidecar process on a free port, ready; yields (base URL, pid)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QWEN_NPU_")}
    env.update(env_extra)
    cmd = [sys.executable, "-m", "qwen_npu", "sidecar", "--host", "127.0.0.1",
           "--port", str(port), "--engine-url", engine_url]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with (
        tempfile.TemporaryDirectory(prefix="perf-sidecar-") as tmp,
        processes.running(
            cmd,
            log=Path(tmp) / "sidecar.log",
            env=env,
            replace_env=True,
            ready_url=base + "/readyz",
            what="the sidecar (make sidecar shows why it does not become ready)",
        ) as proc,
    ):
        yield base, proc.pid


@dataclass
class Latency:
    path: str
    rate: float
    sent: int
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    lag_ms: float  # the latest any request left compared to its schedule (client overload)


@dataclass
class _Conn:
    """One keep-alive HTTP/1.1 connection on raw streams: httpx's millisecond of CPU per request
    would be measured as server latency on a shared two-core machine."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def get(self, request: bytes) -> int:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length, chunked = 0, False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if chunked:
            while size := int((await self.reader.readuntil(b"\r\n")).strip(), 16):
                await self.reader.readexactly(size + 2)
            await self.reader.readuntil(b"\r\n")
        elif length:
            await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        self.writer.close()


async def open_loop(base: str, path: str, rate: float, seconds: float) -> Latency:
    url = httpx.URL(base)
    host, port = url.host, url.port or 80
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: gzip\r\n\r\n".encode()
    latencies: list[float] = []
    errors = 0
    total = int(rate * seconds)
    idle: list[_Conn] = [_Conn(*await asyncio.open_connection(host, port)) for _ in range(8)]
    for conn in idle:  # warm the connections and the route
        await conn.get(request)

    async def one() -> None:
        nonlocal errors
        reused = bool(idle)
        conn = idle.pop() if idle else _Conn(*await asyncio.open_connection(host, port))
        t0 = time.perf_counter()
        try:
            try:
                status = await conn.get(request)
            except (OSError, asyncio.IncompleteReadError):
                if not reused:
                    raise
                # The server closed an idle keep-alive connection (uvicorn: after 5 s); like any
                # HTTP client, retry once on a new one. The latency still counts from t0.
                conn.close()
                conn = _Conn(*await asyncio.open_connection(host, port))
                status = await conn.get(request)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            errors += 1
            conn.close()
            return
        latencies.append((time.perf_counter() - t0) * 1000)
        errors += status not in (200, 503)
        idle.append(conn)

    tasks = []
    start = time.perf_counter()
    lag = 0.0
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lag = max(lag, time.perf_counter() - due)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    for conn in idle:
        conn.close()
    return Latency(
        path, rate, total, errors, percentile(latencies, 50), percentile(latencies, 99),
        max(latencies), lag * 1000,
    )  # fmt: skip


async def scrape_hours(base: str, pid: int, hours: float) -> list[tuple[int, float]]:
    """One hour = 240 /metrics scrapes + 1080 probes; RSS sampled every 10% of the run."""
    scrapes = int(240 * hours)
    samples: list[tuple[int, float]] = [(0, rss_mb(pid))]
    probes = ("/livez", "/readyz", "/startupz")
    async with httpx.AsyncClient(base_url=base, timeout=5) as client:
        for i in range(1, scrapes + 1):
            (await client.get("/metrics")).raise_for_status()
            for k in range(4 + i % 2):  # 1080 / 240 = 4.5 probes per scrape
                await client.get(probes[(i + k) % 3])
            await client.get("/status")
            await asyncio.sleep(0.002)
            if i % max(1, scrapes // 10) == 0:
                samples.append((i, rss_mb(pid)))
    return samples


def render(
    lat: list[Latency], mem: list[tuple[int, float]], hours: float, wall: float, load: str
) -> str:
    ok_lat = all(x.p99_ms < GOAL_P99_MS and x.errors == 0 for x in lat)
    end = mem[-1][1]
    growth = end - mem[len(mem) // 2][1]
    ok_mem = end < GOAL_RSS_MB and growth < 2.0
    lines = [
        "# Sidecar performance",
        "",
        "Measured by `make perf-sidecar` (`python -m tools.perf.sidecar`): the real",
        "sidecar process (uvicorn) against the simulator, both on 127.0.0.1; the client is a",
        "minimal raw-socket HTTP/1.1 client (keep-alive) in the measuring process.",
        f"CPUs: {os.cpu_count()}; load average during the latency runs: {load} (other work on",
        "the machine shows up as latency: read the p99 together with it).",
        "",
        f"## Probe and scrape latency, open loop (goal: p99 < {GOAL_P99_MS:g} ms)",
        "",
        "| endpoint | rate (req/s) | requests | errors | p50 ms | p99 ms | max ms | lag ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for x in lat:
        lines.append(
            f"| `{x.path}` | {x.rate:g} | {x.sent} | {x.errors} | {x.p50_ms:.2f} | "
            f"{x.p99_ms:.2f} | {x.max_ms:.2f} | {x.lag_ms:.1f} |"
        )
    lines += [
        "",
        f"Latency goal: {'MET' if ok_lat else 'NOT MET'}.",
        "",
        f"## Memory over {hours:g} hour-equivalents of scrapes (goal: < {GOAL_RSS_MB:g} MB, "
        "no growth)",
        "",
        "Poll loops sped up (health every 0.05 s, info every 0.1 s, canary every 0.2 s); per hour: "
        "240 `/metrics` scrapes, 1080 probes, 240 `/status` reads.",
        "",
        "| scrapes served | RSS MB |",
        "|---|---|",
    ]
    lines += [f"| {n} | {mb:.1f} |" for n, mb in mem]
    lines += [
        "",
        f"RSS at the end {end:.1f} MB; growth from the middle of the run to the end "
        f"{growth:+.2f} MB. Memory goal: {'MET' if ok_mem else 'NOT MET'}.",
        "",
        f"Wall time {wall:.0f} s.",
        "",
    ]
    return "\n".join(lines)


async def measure() -> str:
    t0 = time.monotonic()
    seconds, hours = 15.0, 4.0  # of open loop per endpoint; hour-equivalents of scrapes
    sim_cfg: dict[str, Any] = {
        "health_check_poll_s": 0.02, "ttft_ms": 1, "itl_ms": 1, "accept_length": 3.0,
    }  # fmt: skip
    fast = {
        "QWEN_NPU_POLL_INTERVAL_S": "0.05",
        "QWEN_NPU_INFO_INTERVAL_S": "0.1",
        "QWEN_NPU_CANARY_INTERVAL_S": "0.2",
    }
    with running_sim(**sim_cfg) as sim:
        with sidecar_process(sim, {}) as (base, _):
            before = os.getloadavg()[0]
            latencies = [
                await open_loop(base, "/readyz", 200.0, seconds),
                await open_loop(base, "/metrics", 20.0, seconds),
            ]
            load = f"{before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (1 min)"
        with sidecar_process(sim, fast) as (base, pid):
            memory = await scrape_hours(base, pid, hours)
    return render(latencies, memory, hours, time.monotonic() - t0, load)


if __name__ == "__main__":
    raise SystemExit(run("sidecar", lambda: [asyncio.run(measure())]))
