"""``qwen-npu preflight MODEL_DIR``: will it start? Exit 0 ready, 1 would fail, 2 bad input.

By hand: ``MODEL_DIR`` and preflight's own flags. From the chart: ``--engine-args`` and the
engine's whole rendered line. Never a traceback: bad input is one line (and, with ``--json``, an
object with ``verdict: bad_input``).
"""

from __future__ import annotations

import argparse
import json
import sys

from qwen_npu.checkpoint.model_config import SSM_DTYPES
from qwen_npu.cli_parser import (
    EXIT_BAD_INPUT,
    OneLineParser,
    float_between,
    fraction,
    positive_int,
)
from qwen_npu.hardware import chips
from qwen_npu.preflight.checkpoint import InputError
from qwen_npu.preflight.rules import SCHEMA_VERSION, Options, run_preflight

PROG = "qwen-npu preflight"
#: Above any NPU's HBM (910B 64 GiB, Ascend950 144 GiB) by far: a larger value is a typo, and the
#: memory arithmetic must not run on it (1e308 overflowed it, blamed on the checkpoint).
NPU_MEMORY_GB_MAX = 1024


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="Check a ModelSlim Qwen3.5/3.6 checkpoint before a long SGLang model load: "
        "config, quantization description, weight index, tokenizer, TP, UB plan, memory. "
        "Exit 0 ready, 1 would fail, 2 bad input.",
    )
    p.add_argument(
        "model_dir",
        metavar="MODEL_DIR",
        nargs="?",
        help="the checkpoint directory (with --engine-args: the engine's --model-path)",
    )
    p.add_argument(
        "--tp",
        "--tp-size",
        dest="tp",
        type=positive_int,
        default=None,
        help="tensor-parallel size (default: the smallest that is feasible and fits)",
    )
    mtp = p.add_mutually_exclusive_group()
    mtp.add_argument(
        "--mtp", dest="mtp", action="store_true", default=None, help="MTP on (default)"
    )
    mtp.add_argument("--no-mtp", dest="mtp", action="store_false", help="MTP (NEXTN) off")
    p.add_argument(
        "--npu-memory-gb",
        type=float_between(0, NPU_MEMORY_GB_MAX, low_open=True),
        default=64.0,
        help=f"GiB per NPU (64; at most {NPU_MEMORY_GB_MAX})",
    )
    p.add_argument(
        "--mem-fraction-static", type=fraction, default=None, help="SGLang's static share (0.8)"
    )
    p.add_argument(
        "--mamba-ssm-dtype",
        choices=SSM_DTYPES,
        default=None,
        help="as SGLang's flag: overrides SGLANG_MAMBA_SSM_DTYPE and the config (the checkpoint's "
        "own dtype when not given)",
    )
    p.add_argument(
        "--chip",
        type=_chip,
        default=None,
        help=f"the target chip: {', '.join(chips.CHIPS)} (default: ${chips.ENV_CHIP}, else "
        f"{chips.DEFAULT_CHIP}); a float32 SSM state works only on ascend950",
    )
    p.add_argument(
        "--check-shards",
        action="store_true",
        help="also read every shard's safetensors header: truncated copies, missing tensors, "
        "exact memory",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (stable keys)")
    p.add_argument(
        "--engine-args",
        nargs=argparse.REMAINDER,
        default=None,
        metavar="ARG",
        help="last: the engine's whole command line (the arguments of sglang.launch_server); "
        "preflight judges it instead of MODEL_DIR and its own engine flags (the chart's init "
        "container passes it)",
    )
    return p


def _chip(text: str) -> str:
    chip = chips.normalise(text)
    if chip is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(chips.CHIPS)}")
    return chip


#: Preflight flags that set what the engine's command line decides under --engine-args.
_ENGINE_FLAGS = {
    "model_dir": "MODEL_DIR",
    "tp": "--tp",
    "mtp": "--mtp/--no-mtp",
    "mem_fraction_static": "--mem-fraction-static",
    "mamba_ssm_dtype": "--mamba-ssm-dtype",
}


def _options(args: argparse.Namespace) -> tuple[str, Options]:
    """(model dir, options) from the flags; InputError when the two ways in are mixed."""
    chip = args.chip or chips.chip_from_env()
    if args.engine_args is not None:
        given = [flag for dest, flag in _ENGINE_FLAGS.items() if getattr(args, dest) is not None]
        if given:
            raise InputError(
                f"{', '.join(given)} given with --engine-args: the engine's command line decides "
                "them; drop them (in the chart: preflight.extraArgs)"
            )
        return Options.from_engine_args(
            args.engine_args,
            chip=chip,
            npu_memory_gb=args.npu_memory_gb,
            check_shards=args.check_shards,
        )
    if args.model_dir is None:
        raise InputError("no MODEL_DIR: pass the checkpoint directory (or --engine-args ...)")
    options = Options(
        tp=args.tp,
        mtp=True if args.mtp is None else args.mtp,
        npu_memory_gb=args.npu_memory_gb,
        mem_fraction_static=0.8 if args.mem_fraction_static is None else args.mem_fraction_static,
        mamba_ssm_dtype=args.mamba_ssm_dtype,
        check_shards=args.check_shards,
        chip=chip,
    )
    return args.model_dir, options


def _bad_input(message: str, as_json: bool) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    if as_json:
        payload = {
            "schema_version": SCHEMA_VERSION,
            "verdict": "bad_input",
            "exit_code": EXIT_BAD_INPUT,
            "error": message,
        }
        print(json.dumps(payload, sort_keys=True))
    return EXIT_BAD_INPUT


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    model_dir = args.model_dir
    try:
        model_dir, options = _options(args)
        report = run_preflight(model_dir, options)
    except InputError as exc:
        return _bad_input(str(exc), args.json)
    except Exception as exc:  # never a traceback in an init container's log
        return _bad_input(
            f"{model_dir}: unexpected {type(exc).__name__}: {exc}; the checkpoint's files "
            "are probably malformed, report this with its config.json",
            args.json,
        )
    if args.json:
        print(json.dumps(report.as_dict(), sort_keys=True))
    else:
        # lazy: a verb loads only what it runs (--help and bad flags stay instant)
        from qwen_npu.preflight.render import render

        print(render(report))
    return report.exit_code
