"""Read what preflight judges from the engine's own command line, by SGLang's argument names.

Why this exists: the chart is the one builder of the engine's command line. Its preflight init
container gets that rendered line (``qwen-npu preflight --engine-args <the engine's args>``), and
this module reads from it what the verdict depends on: the checkpoint (``--model-path``), the TP
(``--tp-size``), the SSM state dtype (``--mamba-ssm-dtype``), speculative decoding
(``--speculative-algorithm``), its draft count (``--speculative-num-draft-tokens``) and
quantization (``--speculative-draft-model-quantization``), the
quantization (``--quantization``) and the static memory share (``--mem-fraction-static``). The
names, aliases and choices are SGLang 0.5.23's (``sglang.srt.server_args.ServerArgs.add_cli_args``;
a test parses every rendered line with both and compares). Every other flag is SGLang's business and
is passed over. The flags are read by the patches' own reader (``patches.modes.flag_value``, the
one that also tells the engine's mode): as in SGLang's parser, a repeated flag keeps its last value
and ``--flag=value`` works; abbreviations are not read here (the chart rejects them in
``engine.extraArgs``). This module turns the values into settings and names a bad one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from qwen_npu.checkpoint.model_config import SSM_DTYPES
from qwen_npu.patches.modes import flag_value
from qwen_npu.preflight.checkpoint import InputError

T = TypeVar("T", int, float)


@dataclass(frozen=True)
class EngineSettings:
    """The settings preflight judges; None where the line leaves SGLang's default."""

    model_path: str
    tp: int | None
    mamba_ssm_dtype: str | None
    speculative_algorithm: str | None
    quantization: str | None
    mem_fraction_static: float | None
    num_draft_tokens: int | None = None
    draft_quantization: str | None = None

    @property
    def mtp(self) -> bool:
        return self.speculative_algorithm is not None


def _number(args: Sequence[str], kind: Callable[[str], T], *names: str) -> T | None:
    """The flag's value as ``kind`` (None when the line does not give it); InputError if not one."""
    text = flag_value(args, *names)
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise InputError(
            f"--engine-args: {names[0]} {text!r} is not {what}; fix the engine's command line "
            "(chart values)"
        ) from None


def read_engine_args(args: Sequence[str]) -> EngineSettings:
    """The settings of ``python3 -m sglang.launch_server <args>``; InputError on a bad line."""
    model_path = flag_value(args, "--model-path", "--model")
    if not model_path:
        raise InputError(
            "--engine-args: the engine's command line has no --model-path; pass the whole line "
            "the engine runs"
        )
    tp = _number(args, int, "--tp-size", "--tensor-parallel-size")
    if tp is not None and tp < 1:
        raise InputError(f"--engine-args: --tp-size {tp} must be at least 1")
    fraction = _number(args, float, "--mem-fraction-static")
    if fraction is not None and not 0 < fraction <= 1:
        raise InputError(f"--engine-args: --mem-fraction-static {fraction} must be in (0, 1]")
    dtype = flag_value(args, "--mamba-ssm-dtype")
    if dtype is not None and dtype not in SSM_DTYPES:
        raise InputError(
            f"--engine-args: --mamba-ssm-dtype {dtype!r} is not one of {', '.join(SSM_DTYPES)}; "
            "fix the engine's command line (chart value engine.mambaSsmDtype)"
        )
    return EngineSettings(
        model_path=model_path,
        tp=tp,
        mamba_ssm_dtype=dtype,
        speculative_algorithm=flag_value(args, "--speculative-algorithm"),
        quantization=flag_value(args, "--quantization"),
        mem_fraction_static=fraction,
        num_draft_tokens=_number(args, int, "--speculative-num-draft-tokens"),
        draft_quantization=flag_value(args, "--speculative-draft-model-quantization"),
    )
