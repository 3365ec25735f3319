"""state: merge-on-write under a lock, atomic replace, and a reader that never raises."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from qwen_npu.patches import state


def _writer(directory: str, index: int) -> None:
    for round_ in range(10):
        state.write_patch_state(
            f"patch-{index}",
            "applied",
            target=f"m:f{index}",
            detail=str(round_),
            state_dir=directory,
        )


def test_missing_or_corrupt_file_reads_as_none(tmp_path: Path) -> None:
    assert state.read_state(None) is None
    assert state.read_state(tmp_path / "absent") is None
    (tmp_path / "state.json").write_text("{not json")
    assert state.read_state(tmp_path) is None
    (tmp_path / "state.json").write_text("[]")
    assert state.read_state(tmp_path) is None
    (tmp_path / "state.json").write_text('{"schema_version": 99, "patches": {}}')
    assert state.read_state(tmp_path) is None


def test_schema(tmp_path: Path) -> None:
    state.write_patch_state("a", "applied", target="m:f", detail="ok", state_dir=tmp_path)
    data = state.read_state(tmp_path)
    assert data is not None
    assert data["schema_version"] == 1 and data["ub_plan"] is None
    assert data["sglang_version"] == "0.5.23" and data["qwen_npu_version"]
    entry = data["patches"]["a"]
    assert (entry["state"], entry["target"], entry["detail"], entry["pid"]) == (
        "applied",
        "m:f",
        "ok",
        os.getpid(),
    )


def test_writes_merge_and_corrupt_files_are_replaced(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("garbage")
    state.write_patch_state("a", "applied", target="m:a", state_dir=tmp_path)
    state.write_ub_plan({"h_block_size": 1, "fits": True}, cache_shape=(1, 2), state_dir=tmp_path)
    state.write_patch_state("b", "drifted", target="m:b", state_dir=tmp_path)
    data = state.read_state(tmp_path)
    assert data is not None
    assert set(data["patches"]) == {"a", "b"}
    assert data["ub_plan"]["cache_shape"] == [1, 2] and data["ub_plan"]["h_block_size"] == 1
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_concurrent_processes_lose_no_entry(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    data = json.loads((tmp_path / "state.json").read_text())
    assert sorted(data["patches"]) == [f"patch-{i}" for i in range(4)]
    assert {e["detail"] for e in data["patches"].values()} == {"9"}


def test_env_dir_and_no_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(state.ENV_STATE_DIR, raising=False)
    assert state.write_patch_state("a", "applied", target="m:f") is None
    monkeypatch.setenv(state.ENV_STATE_DIR, str(tmp_path / "sub"))
    assert state.write_patch_state("a", "applied", target="m:f") == tmp_path / "sub" / "state.json"


def test_unwritable_dir_is_logged_not_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert state.write_patch_state("a", "applied", target="m:f", state_dir=blocker / "x") is None
    err = capsys.readouterr().err
    assert "event=state.write_failed" in err and "next=" in err
