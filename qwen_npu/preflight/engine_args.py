"""What preflight judges, read from the engine's own command line by SGLang 0.5.23's flag names.

The chart builds the engine's line once and hands it to the preflight init container
(``--engine-args``); the flags are read by the patches' reader (``patches.modes.flag_value``: the
last of a repeated flag wins, ``--flag=value`` works), and every other flag is SGLang's business.
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
