"""Tensor-parallel feasibility and the scatter's UB plan per TP size.

SGLang asserts the heads' and widths' divisibility by ``--tp-size`` minutes into a start; the UB
plan depends on the value heads per rank, so it is computed per TP (``hardware.ub_plan``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qwen_npu.checkpoint.model_config import ModelConfig
from qwen_npu.hardware import ub_plan

#: TP sizes reported when none is given (a 910B node has 8 or 16 NPUs).
CANDIDATE_TPS = (1, 2, 4, 8, 16)


@dataclass
class TpCheck:
    """One TP size: what each rank holds, what does not divide, and the UB plan."""

    tp: int
    per_rank: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    ub: ub_plan.UbPlan | None = None

    @property
    def feasible(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "feasible": self.feasible,
            "per_rank": self.per_rank,
            "problems": self.problems,
            "ub_plan": self.ub.as_dict() if self.ub else None,
        }


def _divides(check: TpCheck, key: str, total: int | None, why: str) -> None:
    if not total:
        return
    if total % check.tp:
        check.problems.append(f"--tp-size {check.tp} does not divide {key}={total} ({why})")
    else:
        check.per_rank[key] = total // check.tp


def check_tp(config: ModelConfig, tp: int) -> TpCheck:
    """Every divisibility SGLang 0.5.23 asserts for Qwen3.5/3.6 at ``tp``, and the UB plan."""
    check = TpCheck(tp=tp)
    _divides(check, "linear_num_value_heads", config.linear_num_value_heads, "GDN value heads")
    _divides(check, "linear_num_key_heads", config.linear_num_key_heads, "GDN key heads")
    _divides(check, "num_attention_heads", config.num_attention_heads, "attention heads")
    kv = config.num_key_value_heads
    if kv >= tp:
        _divides(check, "num_key_value_heads", kv, "KV heads, split across ranks")
    elif tp % kv:
        check.problems.append(
            f"--tp-size {tp} is not a multiple of num_key_value_heads={kv} (KV heads are "
            "replicated when fewer than the ranks)"
        )
    else:
        check.per_rank["num_key_value_heads"] = 1
    if config.is_moe:
        _divides(check, "moe_intermediate_size", config.moe_intermediate_size, "expert width")
        _divides(
            check,
            "shared_expert_intermediate_size",
            config.shared_expert_intermediate_size,
            "shared expert width",
        )
    else:
        _divides(check, "intermediate_size", config.intermediate_size, "MLP width")
    heads = check.per_rank.get("linear_num_value_heads")
    if config.has_gdn and heads:
        assert config.linear_value_head_dim is not None and config.linear_key_head_dim is not None
        check.ub = ub_plan.plan(
            config.linear_value_head_dim,
            config.linear_key_head_dim,
            config.mamba_ssm_dtype,
            num_heads=heads,
        )
    return check
