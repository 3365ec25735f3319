"""``make perf-sim``: the simulator's timing fidelity, streaming capacity and calibration, measured.

The client is a minimal asyncio HTTP/1.1 reader (keep-alive, chunked SSE) in its own process rather
than a general HTTP library: to time the server it must add as little delay of its own as possible.
What it measures and why: docs/simulator.md ("Fidelity and capacity", "Calibration").
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
import urllib.request
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from qwen_npu.sim import timing
from qwen_npu.sim.clock import new_loop, ready_at
from qwen_npu.sim.config import SimConfig, build
from qwen_npu.sim.testing import running_sim, running_sim_process
from tools.perf.report import parse_metrics, run, total


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    ttfts: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)  # per token: a chunk of n adds n gaps of gap/n
    tokens: int = 0
    requests: int = 0
    errors: int = 0


class _StreamClient(asyncio.Protocol):
    """One keep-alive connection that sends /generate requests and times their SSE events.

    Parsing happens in ``data_received`` on whole reads (no per-line awaits), so one client
    process keeps up with tens of thousands of events per second; an event's time is the time
    its bytes were read.
    """

    def __init__(self, res: Result) -> None:
        self.res = res
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] | None = None  # the rest of the state: request()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("connection lost"))

    def request(self, head_body: bytes) -> asyncio.Future[None]:
        assert self.transport is not None
        self.buf = b""
        self.in_body = False
        self.seen = 0
        self.first = True
        self.done = asyncio.get_running_loop().create_future()
        self.t0 = self.last = time.monotonic()
        self.transport.write(head_body)
        return self.done

    def data_received(self, data: bytes) -> None:
        now = ready_at() or time.monotonic()
        buf = self.buf + data
        pos = 0
        if not self.in_body:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            if b" 200 " not in buf[: buf.find(b"\r\n")]:
                self.res.errors += 1
                assert self.done is not None
                self.done.set_exception(ConnectionError(buf[:200].decode(errors="replace")))
                return
            self.in_body = True
            pos = end + 4
        res = self.res
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(buf[pos:eol], 16)
            if size == 0:
                if len(buf) < eol + 4:
                    break
                res.tokens += self.seen
                res.requests += 1
                self.buf = b""
                assert self.done is not None
                self.done.set_result(None)
                return
            if len(buf) < eol + 2 + size + 2:
                break
            data_start = eol + 2
            pos = data_start + size + 2
            i = buf.find(b'"completion_tokens":', data_start, pos)
            if i < 0:
                continue  # data: [DONE]
            j = buf.find(b",", i)
            count = int(buf[i + 20 : j])
            n = count - self.seen
            self.seen = count
            if self.first:
                res.ttfts.append(now - self.t0)
                self.first = False
                if n > 1:
                    res.gaps.extend([0.0] * (n - 1))
            elif n > 0:
                res.gaps.extend([(now - self.last) / n] * n)
            self.last = now
        self.buf = buf[pos:]


def _request_bytes(host: str, prompt: list[int], out_len: int) -> bytes:
    body = json.dumps(
        {
            "input_ids": prompt,
            "sampling_params": {"max_new_tokens": out_len, "temperature": 0, "ignore_eos": True},
            "stream": True,
        }
    ).encode()
    head = (
        f"POST /generate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


async def _run(url: str, conc: int, num: int, prompt_len: int, out_len: int) -> Result:
    host, port = url.removeprefix("http://").split(":")
    res = Result()
    counter = iter(range(num))
    loop = asyncio.get_running_loop()

    async def worker(w: int) -> None:
        transport, proto = await loop.create_connection(lambda: _StreamClient(res), host, int(port))
        try:
            for i in counter:
                prompt = [(w * 7919 + i * 31 + j) % 150000 for j in range(prompt_len)]
                await proto.request(_request_bytes(host, prompt, out_len))
        finally:
            transport.close()

    await asyncio.gather(*(worker(w) for w in range(conc)))
    return res


def measure(url: str, conc: int, num: int, prompt_len: int, out_len: int) -> tuple[Result, float]:
    t0 = time.perf_counter()
    with asyncio.Runner(loop_factory=new_loop) as runner:
        res = runner.run(_run(url, conc, num, prompt_len, out_len))
    return res, time.perf_counter() - t0


def _ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000 if xs else float("nan")


def server_ttft(url: str) -> tuple[float, float]:
    """(sum, count) of the simulator's own streaming TTFT histogram."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        m = parse_metrics(resp.read().decode())
    name = "sglang:time_to_first_token_seconds"
    return total(m, name + "_sum", is_streaming="true"), total(
        m, name + "_count", is_streaming="true"
    )


def fidelity(ttft_ms: float, itl_ms: float, concs: list[int], per_conc: int) -> list[str]:
    """One table row per concurrency: configured, measured (client) and server TTFT and ITL."""
    rows = []
    with running_sim(ttft_ms=ttft_ms, itl_ms=itl_ms, max_running_requests=256) as url:
        measure(url, 2, 4, 64, 8)  # warm-up: connections, imports, first allocations
        for conc in concs:
            s0, c0 = server_ttft(url)
            res, dur = measure(url, conc, max(per_conc, conc * 3), 256, 100)
            s1, c1 = server_ttft(url)
            server = (s1 - s0) / (c1 - c0) * 1000 if c1 > c0 else float("nan")
            ttft_p99, itl_p99 = (
                statistics.quantiles(x, n=100)[98] * 1000 for x in (res.ttfts, res.gaps)
            )
            rows.append(
                f"| {conc} | {res.requests} | {ttft_ms:.1f} | {_ms(res.ttfts):.2f} "
                f"| {ttft_p99:.2f} | {server:.2f} | {itl_ms:.1f} "
                f"| {_ms(res.gaps):.2f} | {itl_p99:.2f} | {res.tokens / dur:.0f} |"
            )
    return rows


#: Config keys that are durations: scaling them all by one factor scales every simulated time.
TIME_KEYS = tuple(k for k in SimConfig.model_fields if "_ms" in k)
MTP_PROFILE = "qwen3.6-35b-a3b-910b-tp2-mtp"
NOMTP_PROFILE = "qwen3.6-35b-a3b-910b-tp2-nomtp"


class LoopFigures(NamedTuple):
    """What a closed-loop benchmark reports: means over requests, tokens/s over the run."""

    tpot_ms: float
    output_tok_per_s: float
    ttft_ms: float
    requests: int


def closed_loop(
    profile: str, conc: int, num: int, *, scale: float = 1.0, url: str | None = None
) -> LoopFigures:
    """``num`` requests (1024 in / 100 out) from ``conc`` clients against ``profile``, durations
    times ``scale``, figures at scale 1; ``url``: one already running (else one starts)."""
    lens = (timing.DEFAULT_INPUT_LEN, timing.DEFAULT_OUTPUT_LEN)
    with nullcontext(url) if url else running_sim(**scaled_flags(profile, scale)) as base:
        res, dur = measure(base, conc, num, *lens)
    return LoopFigures(
        tpot_ms=statistics.fmean(res.gaps) * 1000 / scale if res.gaps else float("nan"),
        output_tok_per_s=res.tokens / dur * scale,
        ttft_ms=statistics.fmean(res.ttfts) * 1000 / scale if res.ttfts else float("nan"),
        requests=res.requests,
    )


def scaled_flags(profile: str, scale: float) -> dict[str, Any]:
    """running_sim keywords: the profile, ready at once, its durations times ``scale``."""
    cfg = build(profile=profile, env={})[0]
    flags: dict[str, Any] = {"profile": profile, "startup_delay_s": 0}
    for key in TIME_KEYS:
        value = getattr(cfg, key)
        if value is not None and scale != 1.0:
            flags[key] = value * scale
    return flags


def _row(c: int, requests: int, *sources: Sequence[float], extra: str = "") -> str:
    """A calibration row: TPOT, output tokens/s and TTFT, each ``a / b / ...`` over ``sources``."""
    cells = [
        " / ".join(f"{s[i]:{f}}" for s in sources) for i, f in enumerate((".1f", ".1f", ".0f"))
    ]
    return f"| {c} | {requests} | " + " | ".join([*cells, extra] if extra else cells) + " |"


def calibration(concs: list[int], prompts: dict[int, int], concs_paper: list[int]) -> list[str]:
    """Upstream vs paper vs measured at each concurrency, MTP on (and MTP off beside it)."""
    on, off = (build(profile=p, env={})[0] for p in (MTP_PROFILE, NOMTP_PROFILE))
    measured: dict[str, dict[int, LoopFigures]] = {}
    for name in (MTP_PROFILE, NOMTP_PROFILE):
        with running_sim(**scaled_flags(name, 1.0)) as url:
            measure(url, 1, 1, 16, 4)  # warm-up
            measured[name] = {c: closed_loop(name, c, prompts[c], url=url) for c in concs}
    cross = timing.crossover(on, off, concs_paper)
    lines = [
        "",
        f"## Calibration: `{MTP_PROFILE}` against the upstream table",
        "",
        "SGLang PR #34353 (Qwen3.6-35B-A3B W8A8, 910B TP2, NEXTN 3 steps / 4 draft tokens, "
        "1024 in / 100 out) vs the paper model (`qwen_npu/sim/timing.py`, steady state) vs "
        "this simulator measured in a closed loop (client means; tokens/s over the run, first "
        "wave included). Accept length on paper: "
        f"{timing.accept_length(on):.2f} tokens per verify step.",
        "",
        "| CONC | requests | TPOT ms upstream / paper / measured "
        "| output tok/s upstream / paper / measured | TTFT ms upstream / paper / measured |",
        "|---:|---:|---|---|---|",
    ]
    for c in concs:
        up = timing.UPSTREAM_PR_34353.get(c) or (float("nan"),) * 3
        me = measured[MTP_PROFILE][c]
        lines.append(_row(c, me.requests, up, timing.steady_state(on, c), me))
    lines += [
        "",
        f"Same hardware with MTP off (`{NOMTP_PROFILE}`), from the same parameters:",
        "",
        "| CONC | requests | TPOT ms paper / measured | output tok/s paper / measured "
        "| TTFT ms paper / measured | MTP on/off output tok/s, measured |",
        "|---:|---:|---|---|---|---:|",
    ]
    for c in concs:
        me = measured[NOMTP_PROFILE][c]
        ratio = measured[MTP_PROFILE][c].output_tok_per_s / me.output_tok_per_s
        lines.append(_row(c, me.requests, timing.steady_state(off, c), me, extra=f"{ratio:.2f}"))
    lines += [
        "",
        f"Crossover on paper (first CONC in {concs_paper[0]}..{concs_paper[-1]} where MTP on "
        f"delivers fewer output tokens/s than off): {cross}.",
    ]
    return lines


def capacity(conc: int, itl_ms: float, accept: float | None) -> str:
    """One table row: the streamed tokens/s the simulator sustains on its core, and how late."""
    cfg: dict[str, Any] = {"ttft_ms": 5, "itl_ms": itl_ms, "max_running_requests": conc}
    with running_sim_process(**cfg, accept_length=accept) as (url, proc):
        measure(url, 4, 8, 16, 16)
        cpu0 = cpu_seconds(proc.pid)
        res, dur = measure(url, conc, conc * 3, 16, 200)
        cpu = cpu_seconds(proc.pid) - cpu0
        with urllib.request.urlopen(url + "/sim/stats", timeout=10) as resp:
            stats = json.loads(resp.read())
    per_step = accept or 1.0
    late = [stats.get(f"send_lateness_{q}_ms", float("nan")) for q in ("median", "p99")]
    per_cpu_s = res.tokens / cpu if cpu > 0 else float("nan")
    return (
        f"| {conc} | {itl_ms:.1f} | {per_step:.1f} | {conc * per_step / (itl_ms / 1000):.0f} "
        f"| {res.tokens / dur:.0f} | {per_cpu_s:.0f} | {cpu / dur:.2f} "
        f"| {late[0]:.2f} / {late[1]:.2f} | {_ms(res.gaps):.2f} | {res.errors} |"
    )


def report() -> list[str]:
    calib = calibration([1, 5, 10], {1: 10, 5: 30, 10: 50}, list(range(1, 33)))
    rows = fidelity(50.0, 10.0, [1, 10, 64], 64)
    caps = [capacity(224, 10.0, None), capacity(96, 10.0, 2.5)]
    lines = [  # measured when the runs are over: the load average is the end's
        "# qwen-npu sim: timing fidelity and capacity",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on this machine "
        f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end; client in "
        "its own process; 256 prompt tokens, 100 output tokens, streaming /generate).",
        "",
        "Client-side figures (what a benchmark sees), and the simulator's own mean TTFT from its "
        "`sglang:time_to_first_token_seconds` histogram (from the request's arrival).",
        "",
        "| CONC | requests | TTFT cfg ms | TTFT median ms | TTFT p99 ms | server TTFT mean ms "
        "| ITL cfg ms | ITL median ms | ITL p99 ms | tokens/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "Capacity (one simulator process = one core; the goal is >= 20000 streamed tokens/s). "
        "`tokens per CPU-second` divides the streamed tokens by the simulator process's own CPU "
        "time: the capacity of one dedicated core, whatever the neighbours do; `sim CPU share` "
        "near 1.0 means the process was saturated (on a busy machine, by lack of CPU).",
        "",
        "| CONC | ITL cfg ms | tokens per step | offered tokens/s | streamed tokens/s "
        "| tokens per CPU-second | sim CPU share | server send lateness median / p99 ms "
        "| client ITL median ms | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *caps,
    ]
    return [*lines, *calib, ""]


if __name__ == "__main__":
    raise SystemExit(run("sim", report))
