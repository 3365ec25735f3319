"""Inputs preflight called ready or blamed on the wrong party (issue 40 items 6 and 7).

A tokenizer that is there but empty, truncated or unreadable; a config.json with a UTF-8 BOM
(transformers refuses it); an architecture this engine does not serve; sizes no model has; a
``--npu-memory-gb`` no NPU has; a shard this process may not read (the user's permissions, not a
damaged checkpoint).
"""

from __future__ import annotations

import codecs
import json
import pathlib
from pathlib import Path
from typing import Any

import pytest

from fixtures.checkpoints import write_checkpoint
from qwen_npu.checkpoint.model_config import SUPPORTED_ARCHITECTURES
from tests.preflight.conftest import RunCli


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path / "c", "27B", ssm_dtype="bfloat16")


def _one_error(code: int, out: Any, err: str, *needles: str) -> str:
    assert "Traceback" not in err, err
    assert code == 2 and isinstance(out, dict) and out["verdict"] == "bad_input", (code, out)
    assert err.startswith("qwen-npu preflight: error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err
    assert "probably malformed" not in err and "unexpected" not in err, err
    return err


def test_a_sound_checkpoint_is_ready(ckpt: Path, run_cli: RunCli) -> None:
    """The base every case below changes one thing of."""
    code, out, _ = run_cli(str(ckpt), "--json", "--tp", "2")
    assert code == 0 and out["verdict"].startswith("ready")


@pytest.mark.parametrize(
    ("name", "body", "needle"),
    [
        ("tokenizer.json", "", "file is empty"),
        ("tokenizer.json", '{"version": "1.0", "mod', "malformed JSON"),
        ("tokenizer.json", "\x00\x01garbage", "tokenizer"),
        ("tokenizer.json", '{"version": "1.0"}', "no 'model' object"),
        ("tokenizer.json", "[1, 2]", "no 'model' object"),
        ("tokenizer_config.json", "", "file is empty"),
        ("tokenizer_config.json", '{"model_max', "malformed JSON"),
        ("tokenizer_config.json", "[]", "expected an object"),
    ],
)
def test_a_broken_tokenizer_file_is_bad_input(
    ckpt: Path, run_cli: RunCli, name: str, body: str, needle: str
) -> None:
    (ckpt / name).write_text(body)
    code, out, err = run_cli(str(ckpt), "--json", "--tp", "2")
    _one_error(code, out, err, str(ckpt / name), needle)


def test_an_unreadable_tokenizer_is_bad_input(ckpt: Path, run_cli: RunCli) -> None:
    path = ckpt / "tokenizer.json"
    path.unlink()
    path.mkdir()  # there, and no read of it works (a chmod does not stop root)
    code, out, err = run_cli(str(ckpt), "--json", "--tp", "2")
    _one_error(code, out, err, str(path), "cannot read")


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json"])
def test_a_utf8_bom_is_refused_as_transformers_would(
    ckpt: Path, run_cli: RunCli, name: str
) -> None:
    path = ckpt / name
    path.write_bytes(codecs.BOM_UTF8 + path.read_bytes())
    code, out, err = run_cli(str(ckpt), "--json", "--tp", "2")
    _one_error(code, out, err, str(path), "byte-order mark", "without a BOM")


def _edit_config(ckpt: Path, **values: Any) -> None:
    path = ckpt / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


def test_an_architecture_this_engine_does_not_serve_is_not_ready(
    ckpt: Path, run_cli: RunCli
) -> None:
    _edit_config(ckpt, architectures=["LlamaForCausalLM"])
    code, out, _ = run_cli(str(ckpt), "--json", "--tp", "2")
    assert code == 1 and out["verdict"] == "would_fail"
    found = [f for f in out["findings"] if f["code"] == "architecture-unsupported"]
    assert found and "LlamaForCausalLM" in found[0]["message"]
    assert all(name in found[0]["message"] for name in SUPPORTED_ARCHITECTURES)


@pytest.mark.parametrize(
    ("key", "value"),
    [("hidden_size", 10**30), ("hidden_size", 1e30), ("num_hidden_layers", 10**12),
     ("num_experts", 2**40), ("vocab_size", 10**20)],
)  # fmt: skip
def test_absurd_sizes_are_refused(ckpt: Path, run_cli: RunCli, key: str, value: Any) -> None:
    _edit_config(ckpt, **{key: value})
    code, out, err = run_cli(str(ckpt), "--json", "--tp", "2")
    _one_error(code, out, err, f"'{key}'", "config.json")


@pytest.mark.parametrize("value", ["inf", "1e308", "nan", "0", "-1", "2048"])
def test_npu_memory_out_of_range_blames_the_flag(
    ckpt: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    from qwen_npu.preflight.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([str(ckpt), "--tp", "2", "--npu-memory-gb", value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--npu-memory-gb" in err and "Traceback" not in err
    assert "checkpoint" not in err and err.count("\n") == 1, err


def test_an_unreadable_shard_blames_permissions_not_the_checkpoint(
    tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = write_checkpoint(tmp_path / "c", "27B", ssm_dtype="bfloat16", shard_headers=True)
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    shard = ckpt / sorted(set(index["weight_map"].values()))[0]
    real_open = pathlib.Path.open

    def denied(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == shard:  # root reads a chmod 000 file: deny this one read the way the OS does
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", denied)
    code, out, err = run_cli(str(ckpt), "--json", "--tp", "2", "--check-shards")
    _one_error(code, out, err, str(shard), "Permission denied", "permissions")
