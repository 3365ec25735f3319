"""The Ascend chips the engine targets and what their GDN ops accept for the SSM state.

Why this exists: whether a float32 SSM state works depends on the chip, not on the checkpoint.
SGLang 0.5.23's Ascend GDN path (hardware_backend/npu/attention/ascend_gdn_backend.py) runs the
AscendC chunk op (``torch.ops.npu.chunk_gated_delta_rule``) for prefill and the AscendC verify op
(``torch.ops.npu.recurrent_gated_delta_rule``) for MTP verify. sgl-kernel-npu's sources say:

- the chunk op's host: ``initial_state must be bfloat16 or float32``, then ``FP32 initial_state is
  only supported on Ascend950 (arch35)``, and ``chunk_state dtype must match initial_state``
  (SGLang hands it a bf16 ``chunk_state``);
- the verify op is instantiated for a bf16 state only (``RGDR<bfloat16_t, bfloat16_t>``,
  csrc/recurrent_gated_delta_rule) and its host checks no dtype: an fp32 state is read as bf16
  bytes, which garbles the output without an error (SGLang issue #40419).

The checkpoints' config.json says ``mamba_ssm_dtype: float32`` and SGLang 0.5.23 forces nothing on
NPU, so the chart passes ``--mamba-ssm-dtype bfloat16``. Preflight and the GDN contract read the
rules here; the chip reaches the engine as ``QWEN_NPU_CHIP`` (the chart's ``npu.chip``).
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
#: The SSM state dtype every chip's GDN ops take (prefill and MTP verify alike).
SAFE_SSM_DTYPE = "bfloat16"
PREFILL_OP = "torch.ops.npu.chunk_gated_delta_rule"
VERIFY_OP = "torch.ops.npu.recurrent_gated_delta_rule"
#: The verify op sizes its buffers for at most this many tokens per request (``MAX_MTP = 8`` in
#: sgl-kernel-npu's csrc/recurrent_gated_delta_rule): ``--speculative-num-draft-tokens`` above it
#: overruns them. The chart's schema maximum for ``mtp.numDraftTokens`` is generated from it.
VERIFY_MAX_DRAFT_TOKENS = 8


def normalise(chip: str) -> str | None:
    """The chip's canonical name, or None when it is not one we know."""
    name = chip.strip().lower().replace("-", "").replace("_", "")
    aliases = {"910b": "910b", "ascend910b": "910b", "a3": "a3", "ascend910c": "a3",
               "ascend950": "ascend950", "950": "ascend950"}  # fmt: skip
    return aliases.get(name)


def chip_from_env(environ: Mapping[str, str] | None = None) -> str:
    """``QWEN_NPU_CHIP`` when it names a known chip, else the default (910B)."""
    env = os.environ if environ is None else environ
    return normalise(env.get(ENV_CHIP, "")) or DEFAULT_CHIP


def prefill_op_limit(chip: str, dtype: str) -> str | None:
    """Why the prefill op on ``chip`` cannot take a ``dtype`` state (None when it can): bfloat16
    works everywhere, float32 only where the chunk op takes it (MTP is still bf16-only:
    ``verify_op_limit``)."""
    if dtype == "float32" and (normalise(chip) or chip) not in FP32_STATE_CHIPS:
        return f"the prefill op {PREFILL_OP} takes a float32 state only on Ascend950"
    if dtype not in ("bfloat16", "float32"):
        return f"the prefill op {PREFILL_OP} takes a bfloat16 or float32 state only"
    return None


def verify_op_limit(dtype: str) -> str | None:
    """Why MTP verify cannot read a ``dtype`` state (None for bf16): the op is bf16-only."""
    if dtype == SAFE_SSM_DTYPE:
        return None
    return (
        f"the MTP verify op {VERIFY_OP} is built for a bfloat16 state only and checks no dtype: "
        f"it reads {dtype} bytes as bfloat16 (garbled text, no error)"
    )


def ssm_state_problem(chip: str, dtype: str, mtp: bool) -> tuple[str, str] | None:
    """The one rule preflight and the GDN contract both apply: (the op that cannot take it,
    "prefill" or "verify", and why) for a ``dtype`` SSM state on ``chip`` with MTP on or off;
    None when both ops read it right. The verify op's limit is its source (bf16 only), whatever
    the chip: float32 with MTP is refused on Ascend950 too (MTP off, or bf16).
    """
    limit = prefill_op_limit(chip, dtype)
    if limit is not None:
        return "prefill", f"{limit}, so the first prefill fails"
    verify = verify_op_limit(dtype)
    if verify is not None and mtp:
        return "verify", f"with MTP on, {verify}"
    return None
