"""Read a checkpoint's small files: config, ModelSlim description, weight index, tokenizer.

Anything unusable is an ``InputError`` (exit 2, one line: file, key, fix); a file merely absent is
a finding (the engine would fail), except config.json, without which nothing can be judged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_npu.checkpoint.model_config import (
    SUPPORTED_ARCHITECTURES,
    ModelConfig,
    ModelConfigError,
    json_type,
    read_json,
    read_model_config,
)
from qwen_npu.preflight.findings import BLOCKING, WARNING, Finding, add
from qwen_npu.preflight.quant import DescriptionScan, scan_description

DESCRIPTION_NAME = "quant_model_description.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_WEIGHTS_NAME = "model.safetensors"
TOKENIZER_CONFIG = "tokenizer_config.json"
# A fast tokenizer file, or the slow BPE pair it can be built from.
TOKENIZER_FAST = "tokenizer.json"
TOKENIZER_SLOW = ("vocab.json", "merges.txt")


class InputError(Exception):
    """Bad input (exit 2): the message names the file, what is wrong and the fix."""


@dataclass
class Checkpoint:
    """What was read from the checkpoint directory."""

    root: Path
    config: ModelConfig
    description: dict[str, Any] | None = None
    description_path: Path | None = None
    description_scan: DescriptionScan | None = None
    index: dict[str, Any] | None = None
    index_path: Path | None = None
    total_size: int | None = None
    shard_files: list[str] = field(default_factory=list)
    missing_shards: list[str] = field(default_factory=list)
    shards_checked: bool = False  # headers read (--check-shards)
    tokenizer_files: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def files_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.path,
            "description": str(self.description_path) if self.description_path else None,
            "index": str(self.index_path) if self.index_path else None,
            "shards": len(self.shard_files),
            "missing_shards": self.missing_shards,
            "shards_checked": self.shards_checked,
            "tokenizer": self.tokenizer_files,
        }


def _read_json(path: Path, what: str) -> Any:
    return read_json(path, what, InputError)


def _read_object(path: Path, what: str, expected: str) -> dict[str, Any]:
    """A JSON file whose top level must be an object; ``expected`` says which, and the fix."""
    data = _read_json(path, what)
    if not isinstance(data, dict):
        raise InputError(f"{path}: top level is a JSON {json_type(data)}, expected {expected}")
    return data


def _read_description(ckpt: Checkpoint, path: Path) -> None:
    data = _read_object(
        path,
        "ModelSlim description",
        "an object of tensor name -> scheme; re-export it with msmodelslim",
    )
    scan = scan_description(data)
    if scan.bad_type_key is not None:
        value = data[scan.bad_type_key]
        raise InputError(
            f"{path}: key {scan.bad_type_key!r} is a JSON {json_type(value)}, expected a scheme "
            "string such as 'FLOAT' or 'W8A8_DYNAMIC'; re-export it with msmodelslim"
        )
    quant_type = data.get("model_quant_type")
    if quant_type is not None and not isinstance(quant_type, str):
        raise InputError(
            f"{path}: key 'model_quant_type' is a JSON {json_type(quant_type)}, expected a "
            "string such as 'W8A8_DYNAMIC'; re-export it with msmodelslim"
        )
    ckpt.description, ckpt.description_path, ckpt.description_scan = data, path, scan


def _read_index(ckpt: Checkpoint, path: Path) -> None:
    data = _read_object(
        path,
        "weight index",
        "an object with 'weight_map'; copy the index again from the checkpoint",
    )
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict):
        got = "missing" if weight_map is None else f"a JSON {json_type(weight_map)}"
        raise InputError(
            f"{path}: key 'weight_map' is {got}, expected an object of tensor name -> shard "
            "file; copy the index again from the checkpoint"
        )
    try:
        shards: set[Any] = set(weight_map.values())
    except TypeError:  # a list or object among the values
        shards = {None}
    if not all(isinstance(shard, str) for shard in shards):
        name, bad = next((k, v) for k, v in weight_map.items() if not isinstance(v, str))
        raise InputError(
            f"{path}: key 'weight_map.{name}' is a JSON {json_type(bad)}, expected a "
            "shard file name; copy the index again from the checkpoint"
        )
    metadata = data.get("metadata", {})
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if total is not None and (isinstance(total, bool) or not isinstance(total, int | float)):
        raise InputError(
            f"{path}: key 'metadata.total_size' is a JSON {json_type(total)}, expected a "
            "number of bytes; copy the index again from the checkpoint"
        )
    ckpt.index, ckpt.index_path = data, path
    ckpt.total_size = int(total) if total is not None and total > 0 else None
    ckpt.shard_files = sorted(shards)
    ckpt.missing_shards = [s for s in ckpt.shard_files if not (ckpt.root / s).is_file()]


def _check_tokenizer(ckpt: Checkpoint, names: set[str]) -> None:
    found = [n for n in (TOKENIZER_CONFIG, TOKENIZER_FAST, *TOKENIZER_SLOW) if n in names]
    ckpt.tokenizer_files = found
    has_vocab = TOKENIZER_FAST in names or all(n in names for n in TOKENIZER_SLOW)
    missing = [] if has_vocab else [f"{TOKENIZER_FAST} (or {' + '.join(TOKENIZER_SLOW)})"]
    if TOKENIZER_CONFIG not in names:
        missing.append(TOKENIZER_CONFIG)
    # The files that are there must load: an empty, truncated or unreadable tokenizer fails the
    # engine as surely as a missing one (after the weights are loaded).
    if TOKENIZER_FAST in names:
        fast = _read_json(ckpt.root / TOKENIZER_FAST, "tokenizer")
        if not isinstance(fast, dict) or not isinstance(fast.get("model"), dict):
            raise InputError(
                f"{ckpt.root / TOKENIZER_FAST}: not a tokenizers file (no 'model' object); copy "
                "the tokenizer again from the model's release"
            )
    if TOKENIZER_CONFIG in names:
        config = _read_json(ckpt.root / TOKENIZER_CONFIG, "tokenizer config")
        if not isinstance(config, dict):
            raise InputError(
                f"{ckpt.root / TOKENIZER_CONFIG}: top level is a JSON {json_type(config)}, "
                "expected an object; copy it again from the model's release"
            )
    if missing:
        add(
            ckpt.findings,
            "tokenizer-missing",
            BLOCKING,
            f"tokenizer files missing from {ckpt.root}: {', '.join(missing)}; the engine "
            "fails loading the tokenizer. Copy them from the model's release",
            missing,
        )


def _check_architecture(ckpt: Checkpoint) -> None:
    arch = ckpt.config.architecture
    if arch and arch not in SUPPORTED_ARCHITECTURES:
        add(
            ckpt.findings,
            "architecture-unsupported",
            BLOCKING,
            f"config.json's architectures is {arch}: this engine serves Qwen3.5/3.6 "
            f"checkpoints only ({', '.join(SUPPORTED_ARCHITECTURES)}); pass such a checkpoint",
        )


def _check_weights(ckpt: Checkpoint, names: set[str]) -> None:
    if ckpt.index is None:
        if SINGLE_WEIGHTS_NAME in names:
            return
        add(
            ckpt.findings,
            "index-missing",
            BLOCKING,
            f"{ckpt.root}: neither {INDEX_NAME} nor {SINGLE_WEIGHTS_NAME}; the engine finds "
            "no weights. Copy the weight files and the index from the checkpoint",
        )
        return
    if ckpt.missing_shards:
        add(
            ckpt.findings,
            "shards-missing",
            BLOCKING,
            f"{len(ckpt.missing_shards)} of {len(ckpt.shard_files)} shard files named by "
            f"{INDEX_NAME} are missing; the load would fail after minutes. Finish the copy",
            ckpt.missing_shards,
        )
    if ckpt.total_size is None:
        add(
            ckpt.findings,
            "index-no-total-size",
            WARNING,
            f"{INDEX_NAME} has no metadata.total_size; the memory estimate uses the shapes",
        )


def load_checkpoint(
    model_dir: str | os.PathLike[str],
    *,
    mamba_ssm_dtype: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Checkpoint:
    """Read everything preflight judges; InputError when the input itself is unusable."""
    root = Path(model_dir)
    if not root.exists():
        raise InputError(f"{root}: no such directory; pass the checkpoint directory")
    if not root.is_dir():
        raise InputError(f"{root}: not a directory; pass the checkpoint directory")
    try:
        names = {entry.name for entry in os.scandir(root)}
    except OSError as exc:
        raise InputError(f"{root}: cannot list ({exc.strerror}); check permissions") from exc
    if "config.json" not in names:
        raise InputError(
            f"{root}: config.json is missing; pass the checkpoint directory that holds it"
        )
    try:
        config = read_model_config(root, mamba_ssm_dtype=mamba_ssm_dtype, environ=environ)
    except ModelConfigError as exc:
        raise InputError(str(exc)) from exc
    ckpt = Checkpoint(root=root, config=config)
    if DESCRIPTION_NAME in names:
        _read_description(ckpt, root / DESCRIPTION_NAME)
    if INDEX_NAME in names:
        _read_index(ckpt, root / INDEX_NAME)
    _check_architecture(ckpt)
    _check_weights(ckpt, names)
    _check_tokenizer(ckpt, names)
    for note in config.warnings:
        add(ckpt.findings, "ssm-dtype-ignored", WARNING, note)
    return ckpt
