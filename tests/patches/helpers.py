"""Builders for synthetic ModelSlim descriptions shared by the patch tests."""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType
from typing import Any

PROJ = ("gate_proj", "up_proj", "down_proj")
W_NAMES = ("w1", "w3", "w2")


def expert_entries(
    prefix: str,
    scheme: str | tuple[str, str, str],
    experts: int = 2,
    names: tuple[str, str, str] = PROJ,
) -> dict[str, str]:
    """Description entries for every expert of one fused-MoE layer."""
    schemes = (scheme, scheme, scheme) if isinstance(scheme, str) else scheme
    return {
        f"{prefix}.{e}.{name}.weight": s
        for e in range(experts)
        for name, s in zip(names, schemes, strict=True)
    }


def description(**layers: Any) -> dict[str, Any]:
    """A ModelSlim description: W8A8_DYNAMIC main model plus the given entries."""
    desc: dict[str, Any] = {"model_quant_type": "W8A8_DYNAMIC", "version": "1.0.0"}
    desc.update(expert_entries("model.layers.0.mlp.experts", "W8A8_DYNAMIC"))
    desc["model.layers.0.self_attn.q_proj.weight"] = "W8A8_DYNAMIC"
    for entries in layers.values():
        desc.update(entries)
    return desc


def import_quietly(name: str) -> ModuleType:
    """Import an SGLang module without its import-time warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(name)
