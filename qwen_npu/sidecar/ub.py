"""The two UB plans the sidecar shows: the one the engine used and the one config.json predicts.

The scatter patch writes the plan it really used to the state file; the sidecar predicts one from
config.json and the TP size with the same rule (``hardware.ub_plan.plan``), so a disagreement
(another TP size, a dtype override, a changed kernel) is a metric and an alert, not a surprise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_npu.checkpoint.model_config import ModelConfigError, read_model_config
from qwen_npu.hardware.ub_plan import UbPlanError, plan

_NUMBERS = ("ub_bytes", "h_block_size", "tile_bytes", "buffered_bytes", "headroom_bytes")
NAN = math.nan


@dataclass(frozen=True)
class UbStats:
    """One UB plan's numbers as the ``qwen_npu_ub_*`` gauges show them (NaN: unknown)."""

    known: bool = False
    ub_bytes: float = NAN
    h_block_size: float = NAN
    tile_bytes: float = NAN
    buffered_bytes: float = NAN
    headroom_bytes: float = NAN
    plane_overflow: float = NAN


@dataclass(frozen=True)
class Predicted:
    """The predicted plan (``None`` when it cannot be made) and why not, for /status."""

    plan: dict[str, Any] | None
    error: str | None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def stats_from_plan(data: Mapping[str, Any] | None) -> UbStats:
    """UbStats from a ``UbPlan.as_dict()``-shaped mapping; unknown when anything is off."""
    if not isinstance(data, Mapping):
        return UbStats()
    values: dict[str, float] = {}
    for key in _NUMBERS:
        number = _number(data.get(key))
        if number is None and key == "headroom_bytes":
            number = values["ub_bytes"] - values["buffered_bytes"]
        if number is None:
            return UbStats()
        values[key] = number
    overflow = data.get("plane_overflow")
    if not isinstance(overflow, bool):
        return UbStats()
    return UbStats(known=True, plane_overflow=float(overflow), **values)


def predict(model_dir: Path | None, tp_size: int, mamba_ssm_dtype: str | None) -> Predicted:
    """The plan config.json predicts for one TP rank, or the one-line reason it cannot."""
    if model_dir is None:
        return Predicted(None, "QWEN_NPU_MODEL_DIR is not set")
    try:
        config = read_model_config(model_dir, mamba_ssm_dtype=mamba_ssm_dtype, environ={})
    except ModelConfigError as exc:
        return Predicted(None, str(exc))
    heads, v_dim, k_dim = (
        config.linear_num_value_heads,
        config.linear_value_head_dim,
        config.linear_key_head_dim,
    )
    if heads is None or v_dim is None or k_dim is None:
        return Predicted(
            None, f"{config.path}: no GDN (linear attention) fields; no scatter to plan"
        )
    if heads % tp_size:
        return Predicted(
            None,
            f"{config.path}: linear_num_value_heads {heads} is not divisible by "
            f"QWEN_NPU_TP_SIZE {tp_size}; set the engine's TP size",
        )
    try:
        result = plan(v_dim, k_dim, config.mamba_ssm_dtype, num_heads=heads // tp_size)
    except UbPlanError as exc:
        return Predicted(None, f"{config.path}: {exc}")
    return Predicted(result.as_dict(), None)


def mismatch(engine: UbStats, predicted: UbStats) -> bool:
    """Both known, and the block size or the tile differs."""
    if not (engine.known and predicted.known):
        return False
    return (
        engine.h_block_size != predicted.h_block_size or engine.tile_bytes != predicted.tile_bytes
    )
