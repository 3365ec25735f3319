"""Read a Qwen3.5/3.6 ``config.json`` into one typed record, the way SGLang 0.5.23 reads it.

Preflight and the sidecar need the same fields and the same two traps: the VL checkpoints keep
the text model under ``text_config``, and the SSM state dtype is the flag, else the environment,
else the config, else float32. Standard library only (runs in the engine image).
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CONFIG_NAME = "config.json"
SSM_DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_SSM_DTYPE = "float32"
SSM_DTYPE_ENV = "SGLANG_MAMBA_SSM_DTYPE"
# Qwen3-Next / Qwen3.5 default: every 4th layer is full attention.
DEFAULT_FULL_ATTENTION_INTERVAL = 4
#: The architectures SGLang 0.5.23 serves a Qwen3.5/3.6 checkpoint as (its qwen3_5.py and
#: qwen3_5_text.py ``EntryClass``; tests/checkpoint holds the two equal). Anything else is not this
#: project's model: preflight stops it.
SUPPORTED_ARCHITECTURES = (
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForCausalLM",
)
#: No released model has a size or count in config.json above this (the largest are vocabularies
#: of about 250k); a larger one is a corrupted or hand-edited file, and the checks that loop over
#: layers or multiply sizes must not run on it.
CONFIG_INT_MAX = 1 << 20


_JSON_TYPES = {type(None): "null", bool: "boolean", int: "number", float: "number"}
_JSON_TYPES |= {dict: "object", list: "array", str: "string"}


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


class ModelConfigError(ValueError):
    """A config.json that cannot be used; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class ModelConfig:
    """What serving decisions depend on. GDN fields are None without GDN; experts 0 when dense;
    ``mamba_ssm_dtype_source`` is flag, env, config or default."""

    path: str
    architecture: str
    model_type: str
    is_vl: bool
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    full_attention_interval: int
    num_full_attention_layers: int
    num_linear_attention_layers: int
    linear_num_value_heads: int | None
    linear_num_key_heads: int | None
    linear_value_head_dim: int | None
    linear_key_head_dim: int | None
    linear_conv_kernel_dim: int | None
    mamba_ssm_dtype: str
    mamba_ssm_dtype_source: str
    mamba_ssm_dtype_config: str | None
    mtp_num_hidden_layers: int
    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    tie_word_embeddings: bool
    torch_dtype: str
    warnings: tuple[str, ...] = field(default=())

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def has_gdn(self) -> bool:
        """True when every GDN field needed for TP and the UB plan is present."""
        return None not in (
            self.linear_num_value_heads,
            self.linear_num_key_heads,
            self.linear_value_head_dim,
            self.linear_key_head_dim,
        )

    @property
    def has_mtp(self) -> bool:
        return self.mtp_num_hidden_layers > 0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["warnings"] = list(self.warnings)
        data["is_moe"] = self.is_moe
        data["has_gdn"] = self.has_gdn
        data["has_mtp"] = self.has_mtp
        return data


def config_path(model_dir_or_config_json: str | os.PathLike[str]) -> Path:
    """The config.json a path names: the file itself, or ``<dir>/config.json``."""
    path = Path(model_dir_or_config_json)
    return path / CONFIG_NAME if path.is_dir() else path


def read_json(path: Path, what: str, error: type[Exception] = ModelConfigError) -> Any:
    """A checkpoint's JSON file, parsed, or ``error`` naming the file and the fix (preflight
    passes its own); ``what`` names the file in the fix."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror}); check permissions") from exc
    if not raw.strip():
        raise error(f"{path}: file is empty; copy the {what} again from the checkpoint")
    if raw.startswith(codecs.BOM_UTF8):
        raise error(
            f"{path}: starts with a UTF-8 byte-order mark, which transformers refuses (json: "
            "'Unexpected UTF-8 BOM'); save it as UTF-8 without a BOM, e.g. "
            f"sed -i '1s/^\\xEF\\xBB\\xBF//' {path}"
        )
    try:
        return json.loads(raw)
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not UTF-8 text ({exc.reason}); copy the {what} again from the checkpoint"
        ) from exc
    except json.JSONDecodeError as exc:
        raise error(
            f"{path}: malformed JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); the "
            f"file is truncated or corrupted, copy the {what} again from the checkpoint"
        ) from exc


def _load_json_object(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ModelConfigError(
            f"{path}: file not found; point at the checkpoint directory that holds config.json"
        )
    data = read_json(path, "config.json")
    if not isinstance(data, dict):
        raise ModelConfigError(
            f"{path}: top level is a JSON {json_type(data)}, expected an object; "
            "this is not a Hugging Face config.json"
        )
    return data


class _Reader:
    """Typed access to one JSON object, with errors that name the file and the key."""

    def __init__(self, path: Path, data: Mapping[str, Any], prefix: str) -> None:
        self.path = path
        self.data = data
        self.prefix = prefix

    def _key(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def int_(self, key: str, default: int | None = None, *, minimum: int = 0) -> int:
        value = self.opt_int(key, minimum=minimum)
        if value is None:
            if default is None:
                raise ModelConfigError(
                    f"{self.path}: key {self._key(key)!r} is missing; this checkpoint's "
                    "config.json is incomplete, copy it again from the model's release"
                )
            return default
        return value

    def opt_int(self, key: str, *, minimum: int = 0) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelConfigError(
                f"{self.path}: key {self._key(key)!r} is {json.dumps(value)[:40]} "
                f"(a JSON {json_type(value)}), expected an integer; fix the value in config.json"
            )
        if value < minimum:
            raise ModelConfigError(
                f"{self.path}: key {self._key(key)!r} is {value}, expected an integer >= "
                f"{minimum}; fix the value in config.json"
            )
        if value > CONFIG_INT_MAX:
            raise ModelConfigError(
                f"{self.path}: key {self._key(key)!r} is {value}, above any real model's "
                f"({CONFIG_INT_MAX}); the file is corrupted or hand-edited, copy config.json "
                "again from the checkpoint"
            )
        return value

    def _typed(self, key: str, default: Any, kind: type, expected: str) -> Any:
        value = self.data.get(key)
        if value is not None and not isinstance(value, kind):
            raise ModelConfigError(
                f"{self.path}: key {self._key(key)!r} is a JSON {json_type(value)}, expected "
                f"{expected}; fix the value in config.json"
            )
        return default if value is None else value

    def str_(self, key: str, default: str) -> str:
        return str(self._typed(key, default, str, "a string"))

    def bool_(self, key: str, default: bool) -> bool:
        return bool(self._typed(key, default, bool, "true or false"))


def _architecture(path: Path, top: Mapping[str, Any]) -> str:
    archs = top.get("architectures")
    if archs is None:
        return ""
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ModelConfigError(
            f"{path}: key 'architectures' must be a list of strings, e.g. "
            '["Qwen3_5MoeForConditionalGeneration"]; fix it in config.json'
        )
    return archs[0] if archs else ""


def _layer_split(reader: _Reader, num_layers: int, interval: int) -> tuple[int, int]:
    """(full attention layers, linear attention layers), from ``layer_types`` when present."""
    layer_types = reader.data.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
            raise ModelConfigError(
                f"{reader.path}: key {reader._key('layer_types')!r} must be a list of strings "
                "('full_attention' / 'linear_attention'); fix it in config.json"
            )
        full = sum(1 for t in layer_types if t == "full_attention")
        return full, len(layer_types) - full
    full = sum(1 for layer in range(num_layers) if (layer + 1) % interval == 0)
    return full, num_layers - full


def resolve_ssm_dtype(
    config_value: Any,
    flag: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, str, list[str]]:
    """(dtype, source, warnings) in SGLang's order: flag, env, config, float32. A bad flag is an
    error (SGLang's parser refuses it); a bad env or config value is skipped with a warning."""
    env = os.environ if environ is None else environ
    notes: list[str] = []
    if flag is not None:
        if flag not in SSM_DTYPES:
            raise ModelConfigError(
                f"--mamba-ssm-dtype {flag!r} is not one of {', '.join(SSM_DTYPES)}; "
                "pass one of those"
            )
        return flag, "flag", notes
    dtype, source = DEFAULT_SSM_DTYPE, "default"
    if config_value is not None:
        if config_value in SSM_DTYPES:
            dtype, source = str(config_value), "config"
        else:
            notes.append(
                f"config mamba_ssm_dtype {config_value!r} is not one of {', '.join(SSM_DTYPES)}; "
                f"SGLang ignores it and uses {DEFAULT_SSM_DTYPE}"
            )
    env_value = env.get(SSM_DTYPE_ENV)
    if env_value:
        if env_value in SSM_DTYPES:
            dtype, source = env_value, "env"
        else:
            notes.append(
                f"{SSM_DTYPE_ENV}={env_value!r} is not one of {', '.join(SSM_DTYPES)}; "
                f"SGLang ignores it and keeps {dtype}"
            )
    return dtype, source, notes


def parse_model_config(
    data: Mapping[str, Any],
    path: str | os.PathLike[str] = CONFIG_NAME,
    *,
    mamba_ssm_dtype: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ModelConfig:
    """Build a ModelConfig from an already-parsed config.json object."""
    file = Path(path)
    text = data.get("text_config")
    is_vl = text is not None
    if is_vl and not isinstance(text, dict):
        raise ModelConfigError(
            f"{file}: key 'text_config' is a JSON {json_type(text)}, expected an object; "
            "the VL checkpoint's config.json is corrupted, copy it again"
        )
    body: Mapping[str, Any] = text if isinstance(text, dict) else data
    reader = _Reader(file, body, "text_config." if is_vl else "")
    top = _Reader(file, data, "")

    hidden = reader.int_("hidden_size", minimum=1)
    layers = reader.int_("num_hidden_layers", minimum=1)
    heads = reader.int_("num_attention_heads", minimum=1)
    kv_heads = reader.int_("num_key_value_heads", heads, minimum=1)
    interval = reader.int_("full_attention_interval", DEFAULT_FULL_ATTENTION_INTERVAL, minimum=1)
    full, linear = _layer_split(reader, layers, interval)
    experts = reader.int_("num_experts", 0)
    raw_ssm = body.get("mamba_ssm_dtype", data.get("mamba_ssm_dtype"))
    ssm_dtype, ssm_source, notes = resolve_ssm_dtype(raw_ssm, mamba_ssm_dtype, environ)
    # transformers 4.x writes torch_dtype, 5.x writes dtype; the text part may carry its own.
    torch_dtype = reader.str_("torch_dtype", top.str_("torch_dtype", ""))
    torch_dtype = torch_dtype or reader.str_("dtype", top.str_("dtype", "bfloat16"))
    return ModelConfig(
        path=str(file),
        architecture=_architecture(file, data),
        model_type=reader.str_("model_type", top.str_("model_type", "")),
        is_vl=is_vl,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=reader.int_("head_dim", hidden // heads, minimum=1),
        vocab_size=reader.int_("vocab_size", top.int_("vocab_size", 0)),
        intermediate_size=reader.int_("intermediate_size", 0),
        full_attention_interval=interval,
        num_full_attention_layers=full,
        num_linear_attention_layers=linear,
        linear_num_value_heads=reader.opt_int("linear_num_value_heads", minimum=1),
        linear_num_key_heads=reader.opt_int("linear_num_key_heads", minimum=1),
        linear_value_head_dim=reader.opt_int("linear_value_head_dim", minimum=1),
        linear_key_head_dim=reader.opt_int("linear_key_head_dim", minimum=1),
        linear_conv_kernel_dim=reader.opt_int("linear_conv_kernel_dim", minimum=1),
        mamba_ssm_dtype=ssm_dtype,
        mamba_ssm_dtype_source=ssm_source,
        mamba_ssm_dtype_config=raw_ssm if isinstance(raw_ssm, str) else None,
        mtp_num_hidden_layers=reader.int_("mtp_num_hidden_layers", 0),
        num_experts=experts,
        num_experts_per_tok=reader.int_("num_experts_per_tok", 0),
        moe_intermediate_size=reader.int_("moe_intermediate_size", 0),
        shared_expert_intermediate_size=reader.int_("shared_expert_intermediate_size", 0),
        tie_word_embeddings=reader.bool_(
            "tie_word_embeddings", top.bool_("tie_word_embeddings", False)
        ),
        torch_dtype=torch_dtype,
        warnings=tuple(notes),
    )


def read_model_config(
    model_dir_or_config_json: str | os.PathLike[str],
    *,
    mamba_ssm_dtype: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ModelConfig:
    """``config.json`` (a checkpoint directory or the file) as a ModelConfig, or
    ModelConfigError; ``mamba_ssm_dtype`` is SGLang's flag (None when not passed)."""
    path = config_path(model_dir_or_config_json)
    return parse_model_config(
        _load_json_object(path), path, mamba_ssm_dtype=mamba_ssm_dtype, environ=environ
    )
