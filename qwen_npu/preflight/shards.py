"""``--check-shards``: read each safetensors shard's header to catch truncated or incomplete copies.

A half-copied shard fails a 20-minute load at minute 19. The headers alone (8-byte length, JSON
of dtype, shape and ``data_offsets``) prove each file long enough and every indexed tensor there,
and give exact bytes per tensor. Opt-in: the largest checkpoints have tens of MB of headers.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_npu.preflight.checkpoint import InputError
from qwen_npu.preflight.findings import BLOCKING, Finding, add

#: A header larger than this is not a safetensors header (the format caps it at 100 MB).
MAX_HEADER_BYTES = 100_000_000


@dataclass
class ShardScan:
    """What the headers say: bytes per tensor, and what is wrong with which file."""

    tensor_bytes: dict[str, int] = field(default_factory=dict)
    truncated: list[str] = field(default_factory=list)
    corrupt: dict[str, str] = field(default_factory=dict)  # file -> what is wrong
    missing_tensors: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not (self.truncated or self.corrupt or self.missing_tensors)

    def mtp_bytes(self) -> int:
        return sum(n for name, n in self.tensor_bytes.items() if name.startswith("mtp."))

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        if self.truncated:
            add(
                out,
                "shard-truncated",
                BLOCKING,
                f"{len(self.truncated)} shard file(s) are shorter than their safetensors "
                "header says; the copy is incomplete. Copy them again",
                self.truncated,
            )
        for name, problem in self.corrupt.items():
            add(
                out,
                "shard-corrupt",
                BLOCKING,
                f"{name}: {problem}; not a safetensors file. Copy it again",
                [name],
            )
        if self.missing_tensors:
            add(
                out,
                "shard-tensors-missing",
                BLOCKING,
                f"{len(self.missing_tensors)} tensor(s) the index maps to a shard are not "
                "in that shard's header; the load would fail on them. Re-download the "
                "checkpoint (shards and index from the same revision)",
                self.missing_tensors,
            )
        return out


def _read_header(path: Path) -> tuple[dict[str, Any], int] | str:
    """(header, bytes the header promises: 8 + header + last data offset), or what is wrong."""
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return "truncated"
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:
            return f"header length {length} is not plausible"
        raw = f.read(length)
    if len(raw) < length:
        return "truncated"
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "header is not JSON"
    if not isinstance(header, dict):
        return "header is not a JSON object"
    return header, 8 + length


def scan(root: Path, weight_map: Mapping[str, str], shard_files: list[str]) -> ShardScan:
    """Read the header of every present shard named in ``weight_map``."""
    result = ShardScan()
    expected: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        expected.setdefault(shard, []).append(name)
    for shard in shard_files:
        path = root / shard
        if not path.is_file():
            continue  # reported as shards-missing
        try:
            got = _read_header(path)
        except OSError as exc:  # the file is there but this process cannot read it: not damage
            raise InputError(
                f"{path}: cannot read it ({exc.strerror or exc}); check its permissions and "
                "owner (the engine reads it as the same user)"
            ) from None
        if got == "truncated":
            result.truncated.append(shard)
            continue
        if isinstance(got, str):
            result.corrupt[shard] = got
            continue
        header, needed = got
        last = 0
        sizes = result.tensor_bytes
        for tensor, info in header.items():
            try:
                begin, end = info["data_offsets"]
            except (TypeError, KeyError, ValueError):
                if tensor == "__metadata__":
                    continue
                begin = end = None
            if type(begin) is not int or type(end) is not int:
                result.corrupt[shard] = f"tensor {tensor!r} has no valid data_offsets"
                break
            sizes[tensor] = end - begin
            if end > last:
                last = end
        else:
            if needed + last > path.stat().st_size:
                result.truncated.append(shard)
            result.missing_tensors += [t for t in expected.get(shard, []) if t not in header]
    return result
