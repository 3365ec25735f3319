"""Two fetches of one DEST, the lease, the init container's wait, ``verify``, the preflight verdict.

The concurrent case uses two real processes: the first holds a file half-sent (the hub's gate) while
the second starts; the second waits on the lock, then reuses the first one's result. Events, not
timings: the test waits for the gate to be reached and for the second's ``lock_wait`` line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fixtures.checkpoints import write_checkpoint
from fixtures.hubserver import Hub, Repo
from qwen_npu.fetch.layout import Store
from qwen_npu.fetch.lease import Lease
from qwen_npu.fetch.source import parse_source
from qwen_npu.fetch.wait import wait
from tests.fetch.conftest import BIG, FAST, RunFetch, error_line
from tools.paths import REPO

REPO_ROOT = REPO


def _spawn(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "qwen_npu", "fetch", *argv, *FAST],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_should_make_second_fetch_wait_then_reuse_when_first_is_running(
    hub: Hub, tmp_path: Path
) -> None:
    dest = str(tmp_path / "m")
    gate = threading.Event()
    hub.faults.gate[BIG] = gate
    hub.faults.gate_reached[BIG] = reached = threading.Event()
    first = _spawn("hf://org/model", dest)
    try:
        assert reached.wait(60), "the first fetch never reached the big file"
        second = _spawn("hf://org/model", dest)
        assert second.stderr is not None
        for line in second.stderr:
            if "event=lock_wait" in line:
                break
        else:
            raise AssertionError("the second fetch did not wait on the lock")
        gate.set()
        out1, err1 = first.communicate(timeout=120)
        out2, rest = second.communicate(timeout=120)
    finally:
        gate.set()
        first.kill()
    assert first.returncode == 0, err1
    assert second.returncode == 0, rest
    assert "files verified" in out1
    assert "nothing downloaded" in out2  # it reused the first one's result
    assert all(count == 1 for count in hub.reads.values())  # every file was read once


def test_should_take_over_lock_whose_lease_expired(
    hub: Hub, run_fetch: RunFetch, tmp_path: Path
) -> None:
    dest = tmp_path / "m"
    store = Store(dest)
    store.home.mkdir(parents=True)
    store.lock.write_text(json.dumps({"owner": "dead-node:1", "token": "x", "expires": 1.0}))
    code, _, err = run_fetch("hf://org/model", str(dest))
    assert code == 0, err
    assert "event=lock_expired" in err and "owner=dead-node:1" in err
    assert not store.lock.exists()  # released at the end


def test_should_wait_for_marker_of_that_revision_logging_progress(
    hub: Hub, run_fetch: RunFetch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "m"
    store = Store(dest)
    store.home.mkdir(parents=True)
    store.write_progress(
        {"bytes": 5, "total_bytes": 10, "percent": 50.0, "rate_mb_s": 1.0, "eta_s": 5}
    )
    # Nothing complete yet: the wait logs the running fetch's progress (a fetch holds the lease)
    # and times out (exit 4).
    with Lease(store.lock, seconds=60).held():
        code, _, err = run_fetch(
            "wait",
            str(dest),
            "--source",
            "hf://org/model",
            "--timeout",
            "0.2",
            "--log-every",
            "0.05",
            "--poll",
            "0.05",
        )
    assert code == 4
    assert "event=waiting" in err and "percent=50.0" in err and "eta_s=5" in err
    assert "no complete fetch of hf://org/model" in error_line(err)
    store.progress.unlink()
    # The fetch finishes while the wait waits: the wait returns (sums checked).
    done = threading.Event()
    result: list[object] = []

    def waiter() -> None:
        result.append(
            wait(store, parse_source("hf://org/model"), timeout=60, interval=60, poll=0.05)
        )
        done.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    code, _, fetch_err = run_fetch("hf://org/model", str(dest))
    assert code == 0, fetch_err
    assert done.wait(60)
    thread.join()
    # The waiter's line lands in whichever capture was read last.
    assert "event=ready" in fetch_err + capsys.readouterr().err
    assert result and result[0].root == dest.resolve()  # type: ignore[attr-defined]
    # Another revision asked for: the marker does not match, the wait keeps waiting.
    code, _, err = run_fetch(
        "wait", str(dest), "--source", "hf://org/model@v2", "--timeout", "0.1", "--poll", "0.05"
    )
    assert code == 4
    # A damaged file: wait and verify both refuse it, naming the file.
    (dest.resolve() / "tokenizer.json").write_bytes(b"\0" * 4096)
    code, _, err = run_fetch("wait", str(dest), "--source", "hf://org/model")
    assert code == 1 and "tokenizer.json: sha256 differs" in error_line(err)
    code, out, err = run_fetch("verify", str(dest), "--json")
    assert code == 1 and json.loads(out)["problems"] == [
        "tokenizer.json: sha256 differs from the manifest"
    ]
    code, _, _ = run_fetch("verify", str(dest), "--sizes-only")
    assert code == 0


def test_should_end_with_preflight_verdict_for_profile_tp(
    tmp_path: Path, run_fetch: RunFetch, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = write_checkpoint(tmp_path / "src", "27B", ssm_dtype="bfloat16")
    files = {str(p.relative_to(ckpt)): p.read_bytes() for p in ckpt.rglob("*") if p.is_file()}
    profile = tmp_path / "profile.yaml"
    profile.write_text("engine:\n  tpSize: 2\n")
    with Hub({"Qwen/Qwen3.6-27B-w8a8": Repo(files)}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        code, _, err = run_fetch(
            "hf://Qwen/Qwen3.6-27B-w8a8",
            str(tmp_path / "m"),
            "--profile",
            str(profile),
            fast=False,
        )
    assert code == 0, err
    line = next(line for line in err.splitlines() if "event=preflight" in line)
    assert "verdict=ready" in line and "tp=2" in line and "tp_source=flag" in line
