"""Synthetic Qwen3.5/3.6 ModelSlim checkpoints for tests: config, description, index, tokenizer.

No weights: the files preflight reads (config.json, quant_model_description.json,
model.safetensors.index.json, tokenizer files), laid out like the published checkpoints, with one
description entry per tensor (``.weight`` plus ``.weight_scale`` / ``.weight_offset`` for quantized
projections), so a 397B-sized description holds about 290k keys. Shapes follow the Hugging Face
Qwen3.5 modules, so the index's ``total_size`` is what the real checkpoint would weigh.

Tests and `make perf-preflight` reuse it:
``from tests.support.checkpoints import write_checkpoint``.
"""

from __future__ import annotations

import json
import struct
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The sizes in FACTS.md. Fields not stated there follow the public configs' shapes.
SIZES: dict[str, dict[str, Any]] = {
    "27B": {
        "hidden_size": 5120,
        "num_hidden_layers": 64,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "intermediate_size": 17408,
        "linear_num_value_heads": 48,
        "linear_num_key_heads": 16,
        "num_experts": 0,
    },
    "35B-A3B": {
        "hidden_size": 2048,
        "num_hidden_layers": 40,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "linear_num_value_heads": 32,
        "linear_num_key_heads": 16,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
    },
    "122B-A10B": {
        "hidden_size": 3072,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "linear_num_value_heads": 64,
        "linear_num_key_heads": 16,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 1024,
        "shared_expert_intermediate_size": 1024,
    },
    "397B-A17B": {
        "hidden_size": 4096,
        "num_hidden_layers": 60,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "linear_num_value_heads": 64,
        "linear_num_key_heads": 16,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "moe_intermediate_size": 1024,
        "shared_expert_intermediate_size": 1024,
    },
}

COMMON: dict[str, Any] = {
    "vocab_size": 248320,
    "full_attention_interval": 4,
    "linear_value_head_dim": 128,
    "linear_key_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "mamba_ssm_dtype": "float32",
    "mtp_num_hidden_layers": 1,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 262144,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}

BYTES_PER_WEIGHT = {"FLOAT": 2.0, "W8A8": 1.0, "W8A8_DYNAMIC": 1.0, "W8A8_MXFP8": 1.0}
DEFAULT_BYTES_PER_WEIGHT = 0.5  # the W4 schemes pack two values in a byte


def make_config(
    size: str = "35B-A3B",
    *,
    vl: bool = False,
    ssm_dtype: str | None = "float32",
    mtp_layers: int = 1,
    **overrides: Any,
) -> dict[str, Any]:
    """A config.json object; ``vl`` nests the text model under ``text_config``."""
    text: dict[str, Any] = {**COMMON, **SIZES[size], "mtp_num_hidden_layers": mtp_layers}
    moe = text["num_experts"] > 0
    if not moe:
        for key in ("num_experts", "num_experts_per_tok"):
            text.pop(key, None)
    if ssm_dtype is None:
        text.pop("mamba_ssm_dtype")
    else:
        text["mamba_ssm_dtype"] = ssm_dtype
    text.update(overrides)
    kind = "qwen3_5_moe" if moe else "qwen3_5"
    if not vl:
        arch = "Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"
        return {"architectures": [arch], "model_type": f"{kind}_text", "dtype": "bfloat16", **text}
    arch = "Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"
    return {
        "architectures": [arch],
        "model_type": kind,
        "text_config": {"model_type": f"{kind}_text", "dtype": "bfloat16", **text},
        "vision_config": {"depth": 27, "hidden_size": 1152, "out_hidden_size": text["hidden_size"]},
        "image_token_id": 248056,
        "tie_word_embeddings": False,
    }


@dataclass(frozen=True)
class Tensor:
    """One checkpoint tensor: its name, shape, and whether ModelSlim quantizes it."""

    name: str
    shape: tuple[int, ...]
    part: str  # attention, linear_attention, dense_mlp, routed_experts, shared_experts, mtp, other
    quantizable: bool = False

    @property
    def numel(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n


def _layer(
    base: str, t: Mapping[str, Any], i: int, full: bool, part: str | None
) -> Iterator[Tensor]:
    """The tensors of decoder layer ``i`` under ``base`` (``part`` forces one part, for MTP)."""
    h = t["hidden_size"]
    p = f"{base}.{i}"

    def ten(name: str, shape: tuple[int, ...], kind: str, q: bool = False) -> Tensor:
        return Tensor(f"{p}.{name}", shape, part or kind, q)

    yield ten("input_layernorm.weight", (h,), "other")
    yield ten("post_attention_layernorm.weight", (h,), "other")
    if full:
        heads, kv, hd = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
        yield ten("self_attn.q_proj.weight", (2 * heads * hd, h), "attention", True)
        yield ten("self_attn.k_proj.weight", (kv * hd, h), "attention", True)
        yield ten("self_attn.v_proj.weight", (kv * hd, h), "attention", True)
        yield ten("self_attn.o_proj.weight", (h, heads * hd), "attention", True)
        yield ten("self_attn.q_norm.weight", (hd,), "attention")
        yield ten("self_attn.k_norm.weight", (hd,), "attention")
    else:
        vh, kh = t["linear_num_value_heads"], t["linear_num_key_heads"]
        v, k = t["linear_value_head_dim"], t["linear_key_head_dim"]
        conv = 2 * kh * k + vh * v
        yield ten("linear_attn.in_proj_qkv.weight", (conv, h), "linear_attention", True)
        yield ten("linear_attn.in_proj_z.weight", (vh * v, h), "linear_attention", True)
        yield ten("linear_attn.in_proj_b.weight", (vh, h), "linear_attention")
        yield ten("linear_attn.in_proj_a.weight", (vh, h), "linear_attention")
        yield ten("linear_attn.conv1d.weight", (conv, 1, t["linear_conv_kernel_dim"]), "other")
        yield ten("linear_attn.A_log", (vh,), "other")
        yield ten("linear_attn.dt_bias", (vh,), "other")
        yield ten("linear_attn.norm.weight", (v,), "other")
        yield ten("linear_attn.out_proj.weight", (h, vh * v), "linear_attention", True)
    experts = t.get("num_experts", 0)
    if experts:
        mi, si = t["moe_intermediate_size"], t["shared_expert_intermediate_size"]
        yield ten("mlp.gate.weight", (experts, h), "other")
        for e in range(experts):
            yield ten(f"mlp.experts.{e}.gate_proj.weight", (mi, h), "routed_experts", True)
            yield ten(f"mlp.experts.{e}.up_proj.weight", (mi, h), "routed_experts", True)
            yield ten(f"mlp.experts.{e}.down_proj.weight", (h, mi), "routed_experts", True)
        yield ten("mlp.shared_expert.gate_proj.weight", (si, h), "shared_experts", True)
        yield ten("mlp.shared_expert.up_proj.weight", (si, h), "shared_experts", True)
        yield ten("mlp.shared_expert.down_proj.weight", (h, si), "shared_experts", True)
        yield ten("mlp.shared_expert_gate.weight", (1, h), "other")
    else:
        mi = t["intermediate_size"]
        yield ten("mlp.gate_proj.weight", (mi, h), "dense_mlp", True)
        yield ten("mlp.up_proj.weight", (mi, h), "dense_mlp", True)
        yield ten("mlp.down_proj.weight", (h, mi), "dense_mlp", True)


def text_part(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def tensors(config: Mapping[str, Any]) -> Iterator[Tensor]:
    """Every tensor of the checkpoint ``config`` describes (vision tower left out but one)."""
    t = text_part(config)
    vl = "text_config" in config
    base = "model.language_model" if vl else "model"
    h, vocab = t["hidden_size"], t["vocab_size"]
    interval = t.get("full_attention_interval", 4)
    yield Tensor(f"{base}.embed_tokens.weight", (vocab, h), "other")
    for i in range(t["num_hidden_layers"]):
        yield from _layer(f"{base}.layers", t, i, (i + 1) % interval == 0, None)
    yield Tensor(f"{base}.norm.weight", (h,), "other")
    yield Tensor("lm_head.weight", (vocab, h), "other")
    if vl:
        yield Tensor("model.visual.patch_embed.proj.weight", (1152, 3, 2, 16, 16), "other")
    mtp = t.get("mtp_num_hidden_layers", 0)
    if mtp:
        yield Tensor("mtp.fc.weight", (h, 2 * h), "mtp")
        yield Tensor("mtp.pre_fc_norm_embedding.weight", (h,), "mtp")
        yield Tensor("mtp.pre_fc_norm_hidden.weight", (h,), "mtp")
        for i in range(mtp):
            yield from _layer("mtp.layers", t, i, True, "mtp")
        yield Tensor("mtp.norm.weight", (h,), "mtp")


@dataclass
class Schemes:
    """Which ModelSlim scheme each part gets; ``overrides`` sets single keys (exact names)."""

    model_quant_type: str = "W8A8_DYNAMIC"
    linear: str = "W8A8_DYNAMIC"
    experts: str = "W8A8_DYNAMIC"
    mtp: str = "FLOAT"
    overrides: dict[str, str] = field(default_factory=dict)

    def scheme_for(self, tensor: Tensor) -> str:
        if not tensor.quantizable:
            return "FLOAT"
        if tensor.name.startswith("mtp."):
            return self.mtp
        if tensor.part in ("routed_experts", "shared_experts"):
            return self.experts
        return self.linear


def make_description(config: Mapping[str, Any], schemes: Schemes | None = None) -> dict[str, Any]:
    """A ModelSlim quant_model_description.json object for ``config``."""
    schemes = schemes or Schemes()
    desc: dict[str, Any] = {
        "model_quant_type": schemes.model_quant_type,
        "version": "1.0.0",
        "group_size": 0,
    }
    for tensor in tensors(config):
        scheme = schemes.scheme_for(tensor)
        desc[tensor.name] = scheme
        if scheme != "FLOAT":
            stem = tensor.name.removesuffix(".weight")
            desc[f"{stem}.weight_scale"] = scheme
            desc[f"{stem}.weight_offset"] = scheme
    desc.update(schemes.overrides)
    return desc


def tensor_sizes(config: Mapping[str, Any], description: Mapping[str, Any]) -> dict[str, int]:
    """Bytes of every stored tensor (quantized weights bring a scale and an offset)."""
    sizes: dict[str, int] = {}
    for tensor in tensors(config):
        scheme = description.get(tensor.name, "FLOAT")
        scheme = scheme if isinstance(scheme, str) else "FLOAT"
        per = BYTES_PER_WEIGHT.get(scheme, DEFAULT_BYTES_PER_WEIGHT)
        sizes[tensor.name] = int(tensor.numel * per)
        if scheme != "FLOAT":
            stem = tensor.name.removesuffix(".weight")
            sizes[f"{stem}.weight_scale"] = tensor.shape[0] * 4
            sizes[f"{stem}.weight_offset"] = tensor.shape[0] * 4
    return sizes


def make_index(
    config: Mapping[str, Any], description: Mapping[str, Any], shards: int = 8
) -> dict[str, Any]:
    """A model.safetensors.index.json object: every tensor mapped to one of ``shards`` files."""
    sizes = tensor_sizes(config, description)
    per_shard = -(-len(sizes) // shards)
    weight_map = {
        name: f"model-{i // per_shard + 1:05d}-of-{shards:05d}.safetensors"
        for i, name in enumerate(sizes)
    }
    return {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}


def write_shard_headers(root: Path, index: Mapping[str, Any], sizes: Mapping[str, int]) -> None:
    """Each shard as a real safetensors header followed by a sparse (unwritten) data area."""
    by_shard: dict[str, list[str]] = {}
    for name, shard in index["weight_map"].items():
        by_shard.setdefault(shard, []).append(name)
    for shard, names in by_shard.items():
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name in names:
            header[name] = {
                "dtype": "U8",
                "shape": [sizes[name]],
                "data_offsets": [offset, offset + sizes[name]],
            }
            offset += sizes[name]
        raw = json.dumps(header).encode()
        with (root / shard).open("wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + offset)


TOKENIZER_FILES = {
    "tokenizer.json": {"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}},
    "tokenizer_config.json": {"model_max_length": 262144, "tokenizer_class": "Qwen2Tokenizer"},
    "generation_config.json": {"temperature": 0.6, "top_p": 0.95},
}


#: The description and index texts of the last checkpoint shapes written (a 397B pair is ~25 MB).
_LARGE_FILES: OrderedDict[str, tuple[str, str, list[str]]] = OrderedDict()
_LARGE_FILES_KEPT = 6


def _large_files(config: Mapping[str, Any], schemes: Schemes | None) -> tuple[str, str, list[str]]:
    """The description's and the index's JSON texts and the shard names for ``config``.

    Many tests write the same checkpoint shape; building a 397B description (~290k keys) and its
    index takes seconds of CPU, so each shape is built once per process and its texts reused.
    """
    key = json.dumps(config, sort_keys=True) + repr(schemes or Schemes())
    if key not in _LARGE_FILES:
        desc = make_description(config, schemes)
        idx = make_index(config, desc)
        shards = sorted(set(idx["weight_map"].values()))
        _LARGE_FILES[key] = (json.dumps(desc), json.dumps(idx), shards)
        while len(_LARGE_FILES) > _LARGE_FILES_KEPT:
            _LARGE_FILES.popitem(last=False)
    _LARGE_FILES.move_to_end(key)
    return _LARGE_FILES[key]


def write_checkpoint(
    root: Path,
    size: str = "35B-A3B",
    *,
    vl: bool = False,
    ssm_dtype: str | None = "float32",
    mtp_layers: int = 1,
    schemes: Schemes | None = None,
    config_overrides: Mapping[str, Any] | None = None,
    description: bool = True,
    index: bool = True,
    shard_files: bool = True,
    shard_headers: bool = False,
    tokenizer: bool = True,
) -> Path:
    """Write a synthetic checkpoint directory under ``root`` and return it.

    ``shard_files`` creates the index's shard files as empty placeholders (preflight checks they
    exist); ``shard_headers`` writes them as real safetensors headers over sparse data areas of
    the full size (for ``--check-shards``), which cost no disk space.
    """
    root.mkdir(parents=True, exist_ok=True)
    config = make_config(size, vl=vl, ssm_dtype=ssm_dtype, mtp_layers=mtp_layers)
    if config_overrides:
        text = config["text_config"] if vl else config
        text.update(config_overrides)
    (root / "config.json").write_text(json.dumps(config, indent=2))
    desc_text, index_text, shards = _large_files(config, schemes)
    if description:
        (root / "quant_model_description.json").write_text(desc_text)
    if index:
        (root / "model.safetensors.index.json").write_text(index_text)
        if shard_headers:
            desc = make_description(config, schemes)
            write_shard_headers(root, make_index(config, desc), tensor_sizes(config, desc))
        elif shard_files:
            for shard in shards:
                (root / shard).touch()
    if tokenizer:
        for name, body in TOKENIZER_FILES.items():
            (root / name).write_text(json.dumps(body))
    return root
