"""``make demo``: the whole loop without an NPU: the simulator (the upstream pull request's
checkpoint's profile), the sidecar beside it, a CONC=10 bench, the table and where to look; both
servers stopped at the end, on Ctrl-C or on a failure. Their logs go to ``out/demo/``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

from qwen_npu import processes
from qwen_npu.ports import ENGINE_PORT, SIDECAR_PORT

PROFILE = "qwen3.6-35b-a3b-910b-tp2-mtp"
SIDECAR_LINES = (
    "qwen_npu_engine_up",
    "qwen_npu_engine_ready",
    "qwen_npu_spec_enabled",
    "qwen_npu_canary_runs_total",
)


def say(msg: str) -> None:
    print(f"demo: {msg}", flush=True)


def pick_port(preferred: int) -> int:
    if preferred and processes.port_free(preferred):
        return preferred
    return processes.free_port()


def came_up(url: str, timeout_s: float, proc: subprocess.Popen[bytes], log: Path) -> bool:
    try:
        processes.wait_http(url, timeout_s=timeout_s, proc=proc, log=log)
    except (processes.WaitTimeout, processes.ProcessExited):
        return False
    return True


def sidecar_sample(url: str) -> list[str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
    except (urllib.error.URLError, OSError):
        return []
    return [
        line
        for line in text.splitlines()
        if line.startswith(SIDECAR_LINES) and not line.startswith("#")
    ]


def run(args: argparse.Namespace) -> int:
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    engine_port = pick_port(args.engine_port)
    sidecar_port = pick_port(args.sidecar_port)
    engine = f"http://127.0.0.1:{engine_port}"
    sidecar = f"http://127.0.0.1:{sidecar_port}"
    children: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(name: str, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        children.append((name, processes.start(cmd, log=log, env=env)))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        say(
            f"1/4 starting the SGLang simulator (profile {PROFILE}: Qwen3.6-35B-A3B W8A8, TP2, "
            f"MTP accept length 2.5) on {engine}; it is NOT a model, its text is synthetic"
        )
        start(
            "simulator",
            [py, "-m", "qwen_npu", "sim", "--profile", PROFILE, "--port", str(engine_port),
             "--host", "127.0.0.1"],
            out / "sim.log",
        )  # fmt: skip
        say("   waiting for the simulated engine to load (its profile takes 5 s to start)")
        if not came_up(f"{engine}/health", 60, children[-1][1], out / "sim.log"):
            say(f"the simulator did not come up; see {out / 'sim.log'}")
            return 1
        say(f"2/4 starting the sidecar on {sidecar} (watching {engine})")
        start(
            "sidecar",
            [py, "-m", "qwen_npu", "sidecar", "--engine-url", engine, "--host", "127.0.0.1",
             "--port", str(sidecar_port), "--state-dir", str(out / "state")],
            out / "sidecar.log",
            # A short run: read the engine's counters every 2 s (default 15 s) and run the output
            # canary every 10 s (default 60 s), so the sidecar has something to show at the end.
            env={"QWEN_NPU_INFO_INTERVAL_S": "2", "QWEN_NPU_CANARY_INTERVAL_S": "10"},
        )  # fmt: skip
        sidecar_up = came_up(f"{sidecar}/livez", 30, children[-1][1], out / "sidecar.log")
        if not sidecar_up:
            say(f"the sidecar did not come up (see {out / 'sidecar.log'}); going on without it")
        say(
            f"3/4 load test: {args.num_prompts} requests of 1024 tokens in / 100 out, 10 at a "
            "time, as in the upstream pull request (make bench CONC=10); about 30 s"
        )
        bench = subprocess.run(
            [py, "-m", "qwen_npu", "bench", "--target", engine, "--concurrency", "10",
             "--num-prompts", str(args.num_prompts), "--output", str(out / "bench.jsonl")],
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        keep = "" if args.hold_s > 0 else "; make demo DEMO_HOLD=300 keeps them up 5 more minutes"
        say(f"4/4 where to look (the servers stop when this demo ends{keep}):")
        print(f"  engine (simulated) metrics: {engine}/metrics  (sglang:* names)")
        if sidecar_up:
            print(f"  sidecar metrics:            {sidecar}/metrics  (qwen_npu_* names)")
            print(f"  sidecar status:             {sidecar}/status")
            for line in sidecar_sample(f"{sidecar}/metrics"):
                print(f"    {line}")
        print(f"  bench history:              {out / 'bench.jsonl'} (one JSON line per run)")
        if args.hold_s > 0:
            say(f"keeping the servers up for {args.hold_s:.0f} s (Ctrl-C ends it sooner)")
            time.sleep(args.hold_s)
        return bench.returncode
    except KeyboardInterrupt:
        say("interrupted; stopping what was started")
        return 130
    finally:
        for name, proc in reversed(children):
            if proc.poll() is None:
                processes.stop(proc)
                say(f"stopped {name} (pid {proc.pid})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m qwen_npu.loadtest.demo", description=__doc__)
    p.add_argument("--num-prompts", type=int, default=50)
    p.add_argument("--out-dir", default=os.path.join("out", "demo"))
    p.add_argument("--engine-port", type=int, default=ENGINE_PORT, help="0 = any free port")
    p.add_argument("--sidecar-port", type=int, default=SIDECAR_PORT, help="0 = any free port")
    p.add_argument("--hold-s", type=float, default=0.0, help="keep the servers up this long")
    return run(p.parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
