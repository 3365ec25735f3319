"""The Ascend chips the engine targets and what their GDN ops accept for the SSM state.

Why this exists: whether a float32 SSM state works depends on the chip, not on the checkpoint.
SGLang 0.5.23's Ascend GDN path runs the AscendC chunk op (``torch.ops.npu.chunk_gated_delta_rule``,
fp32 ``initial_state`` only on Ascend950) for prefill and the verify op
(``recurrent_gated_delta_rule``, built for a bf16 state only) for MTP verify. Preflight, the patches'
GDN contract check and the chart read the chip from here. Standard library only.

The chip reaches the engine's processes as ``QWEN_NPU_CHIP`` (the chart renders it from
``npu.chip``); preflight takes ``--chip``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ENV_CHIP = "QWEN_NPU_CHIP"
#: The chips by the names the chart, preflight and the state file use.
CHIPS: tuple[str, ...] = ("910b", "a3", "ascend950")
DEFAULT_CHIP = "910b"
#: Chips whose prefill (chunk) op takes a float32 SSM state.
FP32_STATE_CHIPS: frozenset[str] = frozenset({"ascend950"})


def normalise(chip: str) -> str | None:
    """The chip's canonical name, or None when it is not one we know."""
    name = chip.strip().lower().replace("-", "").replace("_", "")
    aliases = {"910b": "910b", "ascend910b": "910b", "a3": "a3", "ascend910c": "a3",
               "ascend950": "ascend950", "950": "ascend950"}
    return aliases.get(name)


def chip_from_env(environ: Mapping[str, str] | None = None) -> str:
    """``QWEN_NPU_CHIP`` when it names a known chip, else the default (910B)."""
    env = os.environ if environ is None else environ
    return normalise(env.get(ENV_CHIP, "")) or DEFAULT_CHIP


def ssm_state_dtype_supported(chip: str, dtype: str) -> bool:
    """Whether SGLang 0.5.23's Ascend GDN ops on ``chip`` take an SSM state of ``dtype``.

    bfloat16 works everywhere; float32 only where the chunk op takes it (and there the bf16-only
    verify op still limits MTP: see the GDN contract's ``verify_op`` link).
    """
    if dtype == "bfloat16":
        return True
    if dtype == "float32":
        return (normalise(chip) or chip) in FP32_STATE_CHIPS
    return False
