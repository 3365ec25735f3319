"""``make perf-fetch``: what ``qwen-npu fetch`` costs on this machine, from local servers (the
test hub, moto): one PERF_FETCH_GB file per source (PERF_FETCH_S3_GB for moto, which keeps objects
in memory), a second run over the complete DEST, and ``fetch verify`` of a sparse 35 GB-shaped
checkpoint (the hashing cost without the disk's reads).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fixtures.hubserver import Hub, Repo
from qwen_npu.fetch.layout import Revision, Store
from qwen_npu.processes import free_port
from tools.perf.report import run

GB = 10**9
MB = 10**6
FETCH_GB = float(os.environ.get("PERF_FETCH_GB", "4"))
S3_GB = float(os.environ.get("PERF_FETCH_S3_GB", "0.5"))
CKPT_SHARDS = 8
CKPT_BYTES = 35 * GB


def _random_file(path: Path, size: int) -> None:
    rnd = random.Random(25)
    block = rnd.randbytes(16 << 20)
    with path.open("wb") as f:
        left = size
        while left > 0:
            f.write(block[: min(left, len(block))])
            left -= len(block)
            block = block[1:] + block[:1]  # no two blocks alike


# Linux starts a child's peak RSS at its parent's (the high-water mark is carried over fork and
# exec): a small launcher process starts each fetch, so the fetch's peak is its own.
_LAUNCHER = (
    "import json, os, subprocess, sys; "
    "p = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL); "
    "_, status, u = os.wait4(p.pid, 0); "
    "open(sys.argv[1], 'w').write(json.dumps([os.waitstatus_to_exitcode(status), "
    "u.ru_utime + u.ru_stime, u.ru_maxrss * 1024]))"
)


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds, peak RSS bytes of one fetch process; its stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        usage = Path(tmp) / "usage.json"
        start = time.perf_counter()
        launch = [sys.executable, "-c", _LAUNCHER, str(usage), sys.executable, "-m", "qwen_npu"]
        proc = subprocess.run(
            [*launch, "fetch", *argv], env=env, capture_output=True, text=True, check=False
        )
        wall = time.perf_counter() - start
        code, cpu, rss = json.loads(usage.read_text())
    if code != 0:
        raise SystemExit(f"perf-fetch: {' '.join(argv)} failed:\n{proc.stderr[-2000:]}")
    return wall, float(cpu), int(rss), proc.stderr


def _row(label: str, gb: float, wall: float, cpu: float, rss: int) -> str:
    speed = gb * GB / MB / wall
    return f"| {label} | {gb:g} GB | {speed:.0f} MB/s | {cpu / gb:.2f} s | {rss / 2**20:.0f} MiB |"


def _hub_rows(tmp: Path, env: dict[str, str]) -> list[str]:
    big = tmp / "big.safetensors"
    _random_file(big, int(FETCH_GB * GB))
    rows = []
    with Hub({"org/big": Repo({"config.json": b"{}", "model.safetensors": big})}) as hub:
        env = {**env, "HF_ENDPOINT": hub.url, "MODELSCOPE_ENDPOINT": hub.url}
        for scheme in ("hf", "modelscope"):
            dest = tmp / f"dest-{scheme}"
            run = _run([f"{scheme}://org/big", str(dest), "--no-preflight"], env)
            rows.append(_row(f"{scheme}:// (test hub)", FETCH_GB, *run[:3]))
            again, _, _, _ = _run([f"{scheme}://org/big", str(dest), "--no-preflight"], env)
            rows.append(
                f"| {scheme}:// second run (complete DEST) | 0 B | {again:.2f} s wall | | |"
            )
            Store(dest).dest.unlink()
    big.unlink()
    return rows


def _s3_rows(tmp: Path, env: dict[str, str]) -> list[str]:
    # lazy: an extra's (pyproject.toml); the base install goes without
    import boto3

    # moto in its own process: it holds every object in memory (and see _LAUNCHER)
    port = free_port()
    code = (
        "import time; from moto.server import ThreadedMotoServer as T; "
        f"T(ip_address='127.0.0.1', port={port}, verbose=False).start(); time.sleep(86400)"
    )
    server = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        creds = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
        creds |= {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": url}
        keys = {"aws_access_key_id": "k", "aws_secret_access_key": "s"}
        s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1", **keys)
        for _ in range(100):
            try:
                s3.create_bucket(Bucket="perf")
                break
            except Exception:  # the server is still starting
                time.sleep(0.2)
        src = tmp / "s3.bin"
        _random_file(src, int(S3_GB * GB))
        s3.upload_file(str(src), "perf", "m/model.safetensors")
        src.unlink()
        run = _run(["s3://perf/m", str(tmp / "dest-s3"), "--no-preflight"], {**env, **creds})
        return [_row("s3:// (moto)", S3_GB, *run[:3])]
    finally:
        server.kill()
        server.wait()


def _reverify_rows(tmp: Path, env: dict[str, str]) -> list[str]:
    """A 35 GB-shaped complete DEST (sparse shards), re-verified as the init container does."""
    store = Store(tmp / "Qwen3.6-35B-A3B-w8a8")
    rev = Revision(store.rev_dir("c" * 40))
    rev.root.mkdir(parents=True)
    shard = CKPT_BYTES // CKPT_SHARDS
    zero = hashlib.sha256()
    block = bytes(8 << 20)
    for _ in range(shard // len(block)):
        zero.update(block)
    zero.update(bytes(shard % len(block)))
    entries = []
    for i in range(1, CKPT_SHARDS + 1):
        name = f"model-{i:05d}-of-{CKPT_SHARDS:05d}.safetensors"
        with (rev.root / name).open("wb") as f:
            f.truncate(shard)
        digest = zero.hexdigest()
        entries.append(dict(path=name, size=shard, sha256=digest, check="sha256", expected=digest))
    rev.complete(
        {
            "schema_version": 1,
            "source": "hf://Qwen/Qwen3.6-35B-A3B-w8a8",
            "requested_revision": None,
            "revision": "c" * 40,
            "total_size": shard * CKPT_SHARDS,
            "files": entries,
        }
    )
    store.point_to(rev.root)
    rows = []
    for label, extra in (("sizes", ["--sizes-only"]), ("sizes + sha256", [])):
        wall, cpu, rss, _ = _run(["verify", str(store.dest), *extra], env)
        rows.append(
            f"| re-verify 35 GB-shaped DEST, {label} | {CKPT_BYTES / GB:.0f} GB "
            f"| {wall:.1f} s wall ({CKPT_BYTES / MB / wall:.0f} MB/s) | {cpu:.1f} s "
            f"| {rss / 2**20:.0f} MiB |"
        )
    return rows


def report() -> list[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_PROXY") and k not in ("HF_TOKEN", "MODELSCOPE_API_TOKEN")
    }
    env["NO_PROXY"] = "127.0.0.1"
    with tempfile.TemporaryDirectory(dir=os.environ.get("PERF_FETCH_TMP")) as name:
        tmp = Path(name)
        env["HF_HOME"] = str(tmp / "hf-home")
        rows = []
        for part in (_s3_rows, _hub_rows, _reverify_rows):
            new = part(tmp, env)
            print("\n".join(new), flush=True)
            rows += new
    lines = [
        "# qwen-npu fetch: cost on this machine (make perf-fetch)",
        "",
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; servers on "
        "127.0.0.1 (the hub in the harness process, moto in its own); each fetch its own process "
        "(CPU = user + system of that process; RSS = its peak, measured through a small launcher "
        "so that it is not the harness's).",
        "",
        "| what | size | throughput / time | CPU (per GB for fetches) | peak RSS |",
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]
    return lines


if __name__ == "__main__":
    raise SystemExit(run("fetch", report))
