"""Bad input exits 2 with one line naming the file and the fix; never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.checkpoints import write_checkpoint
from tests.preflight.conftest import RunCli

FILES = ["config.json", "quant_model_description.json", "model.safetensors.index.json"]
CORRUPTIONS = {
    "empty": lambda text: "",
    "whitespace": lambda text: "  \n",
    "truncated": lambda text: text[: len(text) // 2],
    "garbage": lambda text: "\x00\x01 not json at all",
    "array": lambda text: "[]",
    "string": lambda text: '"hello"',
}


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path / "c", "27B")


def assert_bad_input(code: int, out: object, err: str, needle: str) -> None:
    assert code == 2
    assert err.startswith("qwen-npu preflight: error: ") and err.count("\n") == 1
    assert needle in err
    assert "Traceback" not in err
    assert isinstance(out, dict) and out["verdict"] == "bad_input" and out["exit_code"] == 2


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupted_file(ckpt: Path, run_cli: RunCli, name: str, kind: str) -> None:
    path = ckpt / name
    path.write_text(CORRUPTIONS[kind](path.read_text()))
    code, out, err = run_cli(str(ckpt), "--json")
    assert_bad_input(code, out, err, str(path))


@pytest.mark.parametrize(
    ("name", "edit", "needle"),
    [
        ("config.json", {"num_hidden_layers": "64"}, "'num_hidden_layers'"),
        ("config.json", {"text_config": "x"}, "'text_config' is a JSON string"),
        (
            "quant_model_description.json",
            {"model.norm.weight": 1},
            "'model.norm.weight' is a JSON number",
        ),
        ("quant_model_description.json", {"model_quant_type": ["W8"]}, "'model_quant_type'"),
        ("model.safetensors.index.json", {"weight_map": []}, "'weight_map' is a JSON array"),
        (
            "model.safetensors.index.json",
            {"metadata": {"total_size": "9"}},
            "'metadata.total_size'",
        ),
    ],
)
def test_wrong_json_types(
    ckpt: Path, run_cli: RunCli, name: str, edit: dict[str, object], needle: str
) -> None:
    path = ckpt / name
    data = json.loads(path.read_text())
    data.update(edit)
    path.write_text(json.dumps(data))
    code, out, err = run_cli(str(ckpt), "--json")
    assert_bad_input(code, out, err, needle)
    assert str(path) in err


def test_weight_map_value_wrong_type(ckpt: Path, run_cli: RunCli) -> None:
    path = ckpt / "model.safetensors.index.json"
    data = json.loads(path.read_text())
    data["weight_map"]["lm_head.weight"] = ["shard"]
    path.write_text(json.dumps(data))
    code, out, err = run_cli(str(ckpt), "--json")
    assert_bad_input(code, out, err, "'weight_map.lm_head.weight' is a JSON array")


def test_missing_config(ckpt: Path, run_cli: RunCli) -> None:
    (ckpt / "config.json").unlink()
    code, out, err = run_cli(str(ckpt), "--json")
    assert_bad_input(code, out, err, "config.json is missing")


def test_not_a_directory(tmp_path: Path, run_cli: RunCli) -> None:
    code, out, err = run_cli(str(tmp_path / "nowhere"), "--json")
    assert_bad_input(code, out, err, "no such directory")
    (tmp_path / "file").write_text("x")
    code, out, err = run_cli(str(tmp_path / "file"), "--json")
    assert_bad_input(code, out, err, "not a directory")


def test_empty_directory_without_json(tmp_path: Path, run_cli: RunCli) -> None:
    code, out, err = run_cli(str(tmp_path))
    assert code == 2 and out == "" and "config.json is missing" in err


def test_config_is_a_directory(tmp_path: Path, run_cli: RunCli) -> None:
    (tmp_path / "config.json").mkdir()
    code, _, err = run_cli(str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "config.json" in err


@pytest.mark.parametrize(
    "argv",
    [["--tp", "0"], ["--tp", "two"], ["--mem-fraction-static", "1.5"], ["--npu-memory-gb", "-1"]],
)
def test_bad_flags_exit_2(ckpt: Path, run_cli: RunCli, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        run_cli(str(ckpt), *argv)
    assert stop.value.code == 2
