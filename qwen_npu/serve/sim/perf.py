"""``make perf-sim``: the simulator's timing fidelity and streaming capacity, measured.

The client is a minimal asyncio HTTP/1.1 reader (keep-alive connections, chunked SSE) rather than a
general HTTP library: the point is to time the server, so the client must add as little of its own
delay as possible and run in its own process (the other core). For each concurrency it reports the
median measured TTFT and inter-token gap beside the configured ones; the capacity run reports the
streamed tokens/s the simulator sustains on its one core and how late its steps were.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_npu.serve.sim.testing import running_sim


@dataclass
class Result:
    ttfts: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)  # per token: a chunk of n adds n gaps of gap/n
    tokens: int = 0
    requests: int = 0
    errors: int = 0


async def _one(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    host: str,
    prompt: list[int],
    out_len: int,
    res: Result,
) -> None:
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
    t0 = time.perf_counter()
    writer.write(head + body)
    status = await reader.readline()
    if b" 200 " not in status:
        res.errors += 1
        raise ConnectionError(status.decode(errors="replace"))
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    last = t0
    seen = 0
    first = True
    while True:
        size_line = await reader.readline()
        size = int(size_line.strip() or b"0", 16)
        if size == 0:
            await reader.readline()
            break
        data = await reader.readexactly(size + 2)
        now = time.perf_counter()
        if data.startswith(b"data: [DONE]"):
            continue
        i = data.find(b'"completion_tokens":')
        j = data.find(b",", i)
        done = int(data[i + 20 : j])
        n = done - seen
        seen = done
        if first:
            res.ttfts.append(now - t0)
            first = False
            n -= 1
            if n > 0:
                res.gaps.extend([0.0] * n)
        elif n > 0:
            res.gaps.extend([(now - last) / n] * n)
        last = now
    res.tokens += seen
    res.requests += 1


async def _run(url: str, conc: int, num: int, prompt_len: int, out_len: int) -> Result:
    host, port = url.removeprefix("http://").split(":")
    res = Result()
    counter = iter(range(num))

    async def worker(w: int) -> None:
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 22)
        try:
            for i in counter:
                prompt = [(w * 7919 + i * 31 + j) % 150000 for j in range(prompt_len)]
                await _one(reader, writer, host, prompt, out_len, res)
        finally:
            writer.close()

    await asyncio.gather(*(worker(w) for w in range(conc)))
    return res


def measure(url: str, conc: int, num: int, prompt_len: int, out_len: int) -> tuple[Result, float]:
    t0 = time.perf_counter()
    res = asyncio.run(_run(url, conc, num, prompt_len, out_len))
    return res, time.perf_counter() - t0


def _ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000 if xs else float("nan")


def fidelity(
    ttft_ms: float, itl_ms: float, concs: list[int], per_conc: int
) -> list[dict[str, Any]]:
    rows = []
    with running_sim(ttft_ms=ttft_ms, itl_ms=itl_ms, max_running_requests=256) as url:
        measure(url, 2, 4, 64, 8)  # warm-up: connections, imports, first allocations
        for conc in concs:
            res, dur = measure(url, conc, max(per_conc, conc * 3), 256, 100)
            rows.append(
                {
                    "conc": conc,
                    "requests": res.requests,
                    "ttft_cfg": ttft_ms,
                    "ttft_med": _ms(res.ttfts),
                    "ttft_p99": statistics.quantiles(res.ttfts, n=100)[98] * 1000,
                    "itl_cfg": itl_ms,
                    "itl_med": _ms(res.gaps),
                    "itl_p99": statistics.quantiles(res.gaps, n=100)[98] * 1000,
                    "tok_s": res.tokens / dur,
                }
            )
    return rows


def capacity(conc: int, itl_ms: float, out_len: int, accept: float | None) -> dict[str, Any]:
    cfg: dict[str, Any] = {"ttft_ms": 5, "itl_ms": itl_ms, "max_running_requests": conc}
    if accept:
        cfg["accept_length"] = accept
    with running_sim(**cfg) as url:
        measure(url, 4, 8, 16, 16)
        res, dur = measure(url, conc, conc * 3, 16, out_len)
    target = conc * (accept or 1.0) / (itl_ms / 1000)
    return {
        "conc": conc,
        "itl_cfg": itl_ms,
        "accept": accept or 1.0,
        "offered_tok_s": target,
        "tok_s": res.tokens / dur,
        "itl_med": _ms([g for g in res.gaps if g > 0]) if accept else _ms(res.gaps),
        "errors": res.errors,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qwen_npu.serve.sim.perf")
    ap.add_argument("--out", default="out/perf/sim.md")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--per-conc", type=int, default=64, help="requests per concurrency level")
    ap.add_argument("--quick", action="store_true", help="fewer requests (development)")
    args = ap.parse_args(argv)
    per = 16 if args.quick else args.per_conc
    rows = fidelity(args.ttft_ms, args.itl_ms, [1, 10, 64], per)
    caps = [
        capacity(256, 10.0, 200 if not args.quick else 60, None),
        capacity(128, 10.0, 200 if not args.quick else 60, 2.5),
    ]
    lines = [
        "# qwen-npu sim: timing fidelity and capacity",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on this machine "
        "(client in its own process; 256 prompt tokens, 100 output tokens, streaming /generate).",
        "",
        "| CONC | requests | TTFT cfg ms | TTFT median ms | TTFT p99 ms | ITL cfg ms "
        "| ITL median ms | ITL p99 ms | tokens/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['conc']} | {r['requests']} | {r['ttft_cfg']:.1f} | {r['ttft_med']:.2f} "
            f"| {r['ttft_p99']:.2f} | {r['itl_cfg']:.1f} | {r['itl_med']:.2f} | {r['itl_p99']:.2f} "
            f"| {r['tok_s']:.0f} |"
        )
    lines += [
        "",
        "Capacity (one simulator process = one core; the goal is >= 20000 streamed tokens/s):",
        "",
        "| CONC | ITL cfg ms | tokens per step | offered tokens/s | streamed tokens/s "
        "| ITL median ms | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in caps:
        lines.append(
            f"| {c['conc']} | {c['itl_cfg']:.1f} | {c['accept']:.1f} | {c['offered_tok_s']:.0f} "
            f"| {c['tok_s']:.0f} | {c['itl_med']:.2f} | {c['errors']} |"
        )
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
