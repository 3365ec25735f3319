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
is passed over. As in SGLang's parser, a repeated flag keeps its last value and ``--flag=value``
works; abbreviations are not read here (the chart rejects them in ``engine.extraArgs``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from qwen_npu.checkpoint.model_config import SSM_DTYPES
from qwen_npu.preflight.checkpoint import InputError


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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise InputError(f"--engine-args: {message}; fix the engine's command line (chart values)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="engine", add_help=False, allow_abbrev=False)
    p.add_argument("--model-path", "--model", dest="model_path")
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int)
    p.add_argument("--mamba-ssm-dtype", dest="mamba_ssm_dtype", choices=SSM_DTYPES)
    p.add_argument("--speculative-algorithm", dest="speculative_algorithm")
    p.add_argument("--quantization", dest="quantization")
    p.add_argument("--mem-fraction-static", dest="mem_fraction_static", type=float)
    p.add_argument("--speculative-num-draft-tokens", dest="num_draft_tokens", type=int)
    p.add_argument("--speculative-draft-model-quantization", dest="draft_quantization")
    return p


def read_engine_args(args: Sequence[str]) -> EngineSettings:
    """The settings of ``python3 -m sglang.launch_server <args>``; InputError on a bad line."""
    parsed, _ = _parser().parse_known_args(list(args))
    if not parsed.model_path:
        raise InputError(
            "--engine-args: the engine's command line has no --model-path; pass the whole line "
            "the engine runs"
        )
    if parsed.tp_size is not None and parsed.tp_size < 1:
        raise InputError(f"--engine-args: --tp-size {parsed.tp_size} must be at least 1")
    fraction = parsed.mem_fraction_static
    if fraction is not None and not 0 < fraction <= 1:
        raise InputError(f"--engine-args: --mem-fraction-static {fraction} must be in (0, 1]")
    return EngineSettings(
        model_path=parsed.model_path,
        tp=parsed.tp_size,
        mamba_ssm_dtype=parsed.mamba_ssm_dtype,
        speculative_algorithm=parsed.speculative_algorithm,
        quantization=parsed.quantization,
        mem_fraction_static=fraction,
        num_draft_tokens=parsed.num_draft_tokens,
        draft_quantization=parsed.draft_quantization,
    )
