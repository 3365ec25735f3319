"""The weights each NPU holds, with the MTP's share, against the static memory budget.

A checkpoint too large for its TP fails only after the whole load. Sizes come from the shards'
headers (``--check-shards``), else the index's total (the MTP's share from the shapes), else the
shapes; weights split evenly over the ranks; 1 GB is 2**30 bytes, as SGLang's logs count it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from qwen_npu.checkpoint.model_config import ModelConfig

GIB = 1 << 30
#: Below this share of the budget left for the KV cache and mamba state, warn.
MIN_HEADROOM_SHARE = 0.10
#: Bytes per stored value for each scheme family (W4 schemes pack two values per byte).
_BYTES = {"FLOAT": 2.0, "W8A8": 1.0, "W8A8_DYNAMIC": 1.0, "W8A8_MXFP8": 1.0}
_W4_BYTES = 0.5


def bytes_per_value(scheme: str) -> float:
    return _BYTES.get(scheme, _W4_BYTES if scheme.startswith("W4") else 2.0)


def dominant(schemes: Mapping[str, int] | None) -> str:
    """The scheme most projections of a part use; FLOAT when the part is not described."""
    if not schemes:
        return "FLOAT"
    return max(schemes.items(), key=lambda item: item[1])[0]


def _layer_params(c: ModelConfig, full: bool) -> dict[str, int]:
    """Parameters of one decoder layer by part (Qwen3.5's gated q_proj is twice the heads)."""
    h = c.hidden_size
    out: dict[str, int] = {}
    if full or not c.has_gdn:
        q = c.num_attention_heads * c.head_dim
        out["attention"] = 2 * q * h + 2 * c.num_key_value_heads * c.head_dim * h + h * q
    else:
        vh, kh = c.linear_num_value_heads or 0, c.linear_num_key_heads or 0
        v, k = c.linear_value_head_dim or 0, c.linear_key_head_dim or 0
        out["linear_attention"] = ((2 * kh * k + vh * v) + 2 * vh * v) * h
        out["other"] = 2 * vh * h
    if c.is_moe:
        out["routed_experts"] = c.num_experts * 3 * c.moe_intermediate_size * h
        out["shared_experts"] = 3 * c.shared_expert_intermediate_size * h
        out["other"] = out.get("other", 0) + c.num_experts * h
    else:
        out["dense_mlp"] = 3 * c.intermediate_size * h
    return out


def shape_bytes(c: ModelConfig, parts: Mapping[str, Mapping[str, int]]) -> tuple[int, int]:
    """(main model bytes, MTP bytes) from the shapes and each part's dominant scheme."""
    main = 0.0
    for i in range(c.num_hidden_layers):
        for part, n in _layer_params(c, (i + 1) % c.full_attention_interval == 0).items():
            main += n * bytes_per_value(dominant(parts.get(part)))
    embed = c.vocab_size * c.hidden_size
    main += embed * 2 * (1 if c.tie_word_embeddings else 2)
    mtp_value = bytes_per_value(dominant(parts.get("mtp")))
    mtp = 2 * c.hidden_size * c.hidden_size * mtp_value
    for _ in range(c.mtp_num_hidden_layers):
        mtp += sum(_layer_params(c, True).values()) * mtp_value
    return int(main), int(mtp) if c.mtp_num_hidden_layers else 0


@dataclass(frozen=True)
class MemoryEstimate:
    """Weights per NPU against the static budget."""

    source: str  # "safetensors" (shard headers), "index" (metadata.total_size) or "shapes"
    total_bytes: int  # every weight in the checkpoint, MTP included
    mtp_bytes: int
    mtp_enabled: bool
    tp: int
    npu_memory_gb: float
    mem_fraction_static: float

    @property
    def loaded_bytes(self) -> int:
        return self.total_bytes if self.mtp_enabled else self.total_bytes - self.mtp_bytes

    @property
    def per_npu_bytes(self) -> int:
        return -(-self.loaded_bytes // self.tp)

    @property
    def mtp_per_npu_bytes(self) -> int:
        return -(-self.mtp_bytes // self.tp) if self.mtp_enabled else 0

    @property
    def budget_bytes(self) -> int:
        return int(self.npu_memory_gb * GIB * self.mem_fraction_static)

    @property
    def headroom_bytes(self) -> int:
        return self.budget_bytes - self.per_npu_bytes

    @property
    def fits(self) -> bool:
        return self.headroom_bytes > 0

    @property
    def tight(self) -> bool:
        return self.fits and self.headroom_bytes < MIN_HEADROOM_SHARE * self.budget_bytes

    def as_dict(self) -> dict[str, Any]:
        derived = ("per_npu_bytes", "mtp_per_npu_bytes", "budget_bytes", "headroom_bytes", "fits")
        return {**asdict(self), **{key: getattr(self, key) for key in derived}}


def estimate(
    config: ModelConfig,
    parts: Mapping[str, Mapping[str, int]],
    total_size: int | None,
    *,
    measured: tuple[int, int] | None = None,
    tp: int,
    mtp: bool,
    npu_memory_gb: float,
    mem_fraction_static: float,
) -> MemoryEstimate:
    """One TP size; ``measured`` is (total, MTP) bytes from the shards' headers."""
    main, mtp_bytes = shape_bytes(config, parts)
    if measured is not None:
        source, (total, mtp_bytes) = "safetensors", measured
    elif total_size is not None:
        source, total = "index", total_size
        mtp_bytes = min(mtp_bytes, total)
    else:
        source, total = "shapes", main + mtp_bytes
    return MemoryEstimate(
        source=source,
        total_bytes=total,
        mtp_bytes=mtp_bytes,
        mtp_enabled=mtp and config.has_mtp,
        tp=tp,
        npu_memory_gb=npu_memory_gb,
        mem_fraction_static=mem_fraction_static,
    )


def gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"
