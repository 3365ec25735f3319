"""``--check-shards``: truncated copies, corrupt headers, tensors missing, exact memory."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from fixtures.checkpoints import (
    make_config,
    make_description,
    tensor_sizes,
    write_checkpoint,
)
from qwen_npu.preflight import Options, run_preflight
from tests.preflight.conftest import RunCli

SHARD = "model-00002-of-00008.safetensors"


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path / "c", "27B", shard_headers=True, ssm_dtype="bfloat16")


def check(path: Path) -> set[str]:
    report = run_preflight(path, Options(check_shards=True), environ={})
    return {f.code for f in report.findings if f.severity == "blocking"}


def read_header(path: Path) -> dict[str, object]:
    with path.open("rb") as f:  # the data area is gigabytes (sparse): read the header only
        (length,) = struct.unpack("<Q", f.read(8))
        return dict(json.loads(f.read(length)))


def test_complete_shards_give_exact_memory(ckpt: Path, run_cli: RunCli) -> None:
    code, data, _ = run_cli(str(ckpt), "--check-shards", "--json")
    assert code == 0 and data["files"]["shards_checked"] is True
    config = make_config("27B")
    sizes = tensor_sizes(config, make_description(config))
    assert data["memory"]["source"] == "safetensors"
    assert data["memory"]["total_bytes"] == sum(sizes.values())
    assert data["memory"]["mtp_bytes"] == sum(n for k, n in sizes.items() if k.startswith("mtp."))


def test_truncated_shard(ckpt: Path) -> None:
    path = ckpt / SHARD
    os.truncate(path, path.stat().st_size - 1)
    report = run_preflight(ckpt, Options(check_shards=True), environ={})
    (finding,) = [f for f in report.findings if f.code == "shard-truncated"]
    assert finding.keys == (SHARD,)
    assert report.memory.source == "index"  # an incomplete scan does not replace the index


@pytest.mark.parametrize("size", [0, 5, 20])
def test_shard_shorter_than_its_header(ckpt: Path, size: int) -> None:
    os.truncate(ckpt / SHARD, size)
    assert check(ckpt) == {"shard-truncated"}


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (struct.pack("<Q", 10**12), "not plausible"),
        (struct.pack("<Q", 4) + b"{{{{" + b"\0" * 64, "not JSON"),
        (struct.pack("<Q", 2) + b"[]" + b"\0" * 64, "not a JSON object"),
        (struct.pack("<Q", 14) + b'{"t": {"a":1}}' + b"\0" * 64, "no valid data_offsets"),
    ],
)
def test_corrupt_header(ckpt: Path, raw: bytes, needle: str) -> None:
    (ckpt / SHARD).write_bytes(raw)
    report = run_preflight(ckpt, Options(check_shards=True), environ={})
    (finding,) = [f for f in report.findings if f.code == "shard-corrupt"]
    assert needle in finding.message and finding.keys == (SHARD,)


def test_tensor_missing_from_its_shard(ckpt: Path) -> None:
    path = ckpt / SHARD
    header = read_header(path)
    gone = next(k for k in header if k != "__metadata__")
    del header[gone]
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    os.truncate(path, 8 + len(raw) + 10**9)
    report = run_preflight(ckpt, Options(check_shards=True), environ={})
    (finding,) = [f for f in report.findings if f.code == "shard-tensors-missing"]
    assert finding.keys == (gone,)


def test_placeholders_pass_without_the_flag_and_fail_with_it(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "c", "27B", ssm_dtype="bfloat16")  # empty shard files
    assert check(path) == {"shard-truncated"}
    report = run_preflight(path, Options(), environ={})
    assert not [f for f in report.findings if f.severity == "blocking"]
