"""The shared config.json reader: text and VL layouts, the SSM dtype rule, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.checkpoints import SIZES, make_config
from qwen_npu.checkpoint.model_config import ModelConfigError, read_model_config


def write(tmp_path: Path, config: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("vl", [False, True])
def test_reads_every_size_in_both_layouts(tmp_path: Path, size: str, vl: bool) -> None:
    cfg = read_model_config(write(tmp_path, make_config(size, vl=vl)), environ={})
    spec = SIZES[size]
    assert cfg.is_vl is vl
    assert cfg.hidden_size == spec["hidden_size"]
    assert cfg.num_hidden_layers == spec["num_hidden_layers"]
    assert cfg.linear_num_value_heads == spec["linear_num_value_heads"]
    assert (cfg.linear_value_head_dim, cfg.linear_key_head_dim) == (128, 128)
    assert cfg.num_experts == spec["num_experts"]
    assert cfg.is_moe is (spec["num_experts"] > 0)
    assert cfg.mtp_num_hidden_layers == 1
    assert cfg.num_full_attention_layers == spec["num_hidden_layers"] // 4
    assert cfg.num_full_attention_layers + cfg.num_linear_attention_layers == cfg.num_hidden_layers
    assert (cfg.mamba_ssm_dtype, cfg.mamba_ssm_dtype_source) == ("float32", "config")


def test_directory_or_file(tmp_path: Path) -> None:
    write(tmp_path, make_config("27B"))
    assert read_model_config(tmp_path, environ={}).hidden_size == 5120


def test_vl_reads_text_config_not_top_level(tmp_path: Path) -> None:
    config = make_config("35B-A3B", vl=True, ssm_dtype="bfloat16")
    config["hidden_size"] = 999  # a stray top-level key must not win over text_config
    cfg = read_model_config(write(tmp_path, config), environ={})
    assert cfg.hidden_size == 2048
    assert cfg.mamba_ssm_dtype == "bfloat16"
    assert cfg.architecture == "Qwen3_5MoeForConditionalGeneration"


@pytest.mark.parametrize(
    ("config_value", "env", "flag", "expected", "source"),
    [
        (None, None, None, "float32", "default"),
        ("bfloat16", None, None, "bfloat16", "config"),
        ("float32", "bfloat16", None, "bfloat16", "env"),
        ("float32", "bfloat16", "float16", "float16", "flag"),
        ("bfloat16", "fp8", None, "bfloat16", "config"),  # invalid env is ignored, as SGLang does
        ("int4", None, None, "float32", "default"),  # invalid config value is ignored
    ],
)
def test_ssm_dtype_order_flag_env_config_default(
    tmp_path: Path,
    config_value: str | None,
    env: str | None,
    flag: str | None,
    expected: str,
    source: str,
) -> None:
    path = write(tmp_path, make_config("35B-A3B", ssm_dtype=config_value))
    environ = {"SGLANG_MAMBA_SSM_DTYPE": env} if env else {}
    cfg = read_model_config(path, mamba_ssm_dtype=flag, environ=environ)
    assert (cfg.mamba_ssm_dtype, cfg.mamba_ssm_dtype_source) == (expected, source)
    invalid = env == "fp8" or config_value == "int4"
    assert bool(cfg.warnings) is invalid


def test_invalid_flag_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="--mamba-ssm-dtype 'fp64'"):
        read_model_config(write(tmp_path, make_config("27B")), mamba_ssm_dtype="fp64", environ={})


def test_layer_types_win_over_interval(tmp_path: Path) -> None:
    types = ["linear_attention", "full_attention"] * 20
    cfg = read_model_config(write(tmp_path, make_config("35B-A3B", layer_types=types)), environ={})
    assert (cfg.num_full_attention_layers, cfg.num_linear_attention_layers) == (20, 20)


def test_defaults_kv_heads_and_head_dim(tmp_path: Path) -> None:
    config = make_config("27B")
    del config["num_key_value_heads"], config["head_dim"]
    cfg = read_model_config(write(tmp_path, config), environ={})
    assert cfg.num_key_value_heads == cfg.num_attention_heads == 24
    assert cfg.head_dim == 5120 // 24


def test_no_gdn_fields(tmp_path: Path) -> None:
    config = make_config("27B")
    del config["linear_num_value_heads"]
    cfg = read_model_config(write(tmp_path, config), environ={})
    assert cfg.linear_num_value_heads is None and not cfg.has_gdn


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("", "file is empty"),
        ('{"hidden_size": 20', "malformed JSON at line 1"),
        ("[1, 2]", "top level is a JSON array"),
        (b'{"a": "\xc3\x28"}', "not UTF-8"),
        (b"\xff\xfe\x00garbage", "malformed JSON"),
        (json.dumps({"num_hidden_layers": 4}), "'hidden_size' is missing"),
        (json.dumps({**make_config("27B"), "hidden_size": "5120"}), "'hidden_size' is \"5120\""),
        (json.dumps({**make_config("27B"), "num_hidden_layers": True}), "expected an integer"),
        (json.dumps({**make_config("27B"), "num_attention_heads": 0}), "expected an integer >= 1"),
        (json.dumps({"text_config": [1]}), "'text_config' is a JSON array"),
        (json.dumps({"text_config": {"hidden_size": 8}}), "'text_config.num_hidden_layers'"),
        (json.dumps({**make_config("27B"), "architectures": "Qwen"}), "'architectures'"),
        (json.dumps({**make_config("27B"), "layer_types": "full"}), "'layer_types'"),
        (json.dumps({**make_config("27B"), "tie_word_embeddings": "no"}), "true or false"),
    ],
)
def test_bad_config_is_one_line_naming_file_and_key(
    tmp_path: Path, body: str | bytes, needle: str
) -> None:
    path = tmp_path / "config.json"
    if isinstance(body, bytes):
        path.write_bytes(body)
    else:
        path.write_text(body)
    with pytest.raises(ModelConfigError) as err:
        read_model_config(path, environ={})
    message = str(err.value)
    assert needle in message
    assert str(path) in message and "\n" not in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="file not found"):
        read_model_config(tmp_path, environ={})


def test_as_dict_is_json(tmp_path: Path) -> None:
    cfg = read_model_config(write(tmp_path, make_config("35B-A3B", vl=True)), environ={})
    data = json.loads(json.dumps(cfg.as_dict()))
    assert data["linear_num_value_heads"] == 32 and data["has_mtp"] is True and data["is_vl"]
