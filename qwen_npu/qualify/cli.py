"""``qwen-npu qualify``: run the claims against a deployment, write the report, print one line.

Exit status: 0 every claim that ran passed (skipped ones listed, not failing), 1 a claim failed
(or, with ``--require-npu``, an NPU-only check was skipped), 2 bad input (a flag, a file, a URL:
one line, before anything runs). Every path and number is checked by the parser (cli_parser's
range-checked numbers and output folder; the input files here: present, a file, readable,
non-empty UTF-8 text), the eval file and a baseline are read before the first request, and the
output folder is checked before the long run starts.

Usage: ``qwen-npu qualify --target URL [--compare URL] [--sidecar URL] [--state-dir DIR]
[--engine-log FILE] [--eval FILE] [--kernels] [--require-npu] [--output-dir DIR] ...``
(``--help`` lists every flag; docs/runbook.md "Qualifying a deployment" says what to do with each
failed claim).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qwen_npu.cli_parser import (
    OneLineParser,
    fail,
    input_dir,
    non_negative_int,
    output_dir,
    positive_float,
    positive_int,
    unit_interval,
)
from qwen_npu.ports import LOCAL_ENGINE_URL
from qwen_npu.qualify import prompts, report
from qwen_npu.qualify.claims import CLAIMS, EARLY_TOKENS, KERNEL_BATCHES, accuracy
from qwen_npu.qualify.client import DEFAULT_TIMEOUT_S, Endpoint
from qwen_npu.qualify.verdict import Check, Claim, exit_status, skipped_claim

PROG = "qwen-npu qualify"
DEFAULT_OUTPUT_DIR = "out/qualify"
ENV_API_KEY_FILE = "QWEN_NPU_ENGINE_API_KEY_FILE"


def _text_file(text: str) -> Path:
    """An input file: present, a file, readable, not empty, UTF-8 text (no NUL bytes)."""
    path = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path is not a file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file; check the path")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file (a folder?); pass a file")
    try:
        with path.open("rb") as fh:
            head = fh.read(65536)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: cannot read it ({exc.strerror})") from None
    if not head.strip():
        raise argparse.ArgumentTypeError(f"{text} is empty; pass a file with content")
    try:
        if b"\0" in head:
            raise UnicodeDecodeError("utf-8", head, head.index(b"\0"), head.index(b"\0") + 1, "NUL")
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.end < len(head) - 4 or exc.reason == "NUL":  # not a character cut at the buffer end
            raise argparse.ArgumentTypeError(
                f"{text} is not UTF-8 text (byte {exc.start}); pass a text file"
            ) from None
    return path


def _url(text: str) -> str:
    if not text.startswith(("http://", "https://")) or len(text.split("://", 1)[1]) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL; use http://<host>:<port>")
    return text.rstrip("/")


def _record(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: use KEY=VALUE, e.g. engine-image=<ref>")
    return key.strip(), value.strip()


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r}: use integers, e.g. "1 5 10"') from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more integers of 1 or more")
    return sorted(set(values))


def _claims(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in CLAIMS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r}: name claims from {', '.join(CLAIMS)}, comma-separated"
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="Qualify a deployment: start, answers, accuracy, speed and kernels as claims "
        "with verdicts and evidence, in report.md and report.json.",
    )
    t = p.add_argument_group("where")
    t.add_argument("--target", type=_url, default=LOCAL_ENGINE_URL, help="engine base URL")
    t.add_argument(
        "--compare", type=_url, default=None, help="second endpoint: the same model with MTP off "
        "or on the copy route (answers, accuracy, speed compare against it)",
    )  # fmt: skip
    t.add_argument("--sidecar", type=_url, default=None, help="the target's sidecar (:9400)")
    t.add_argument("--state-dir", type=input_dir, default=None, help="the engine's state folder")
    t.add_argument("--engine-log", type=_text_file, default=None, help="the engine's start log")
    t.add_argument(
        "--api-key-file", type=_text_file, default=os.environ.get(ENV_API_KEY_FILE) or None,
        help=f"the engine's API key (default ${ENV_API_KEY_FILE})",
    )  # fmt: skip
    t.add_argument(
        "--record", type=_record, action="append", default=[], metavar="KEY=VALUE",
        help="recorded in the report (versions, image digests); repeatable",
    )  # fmt: skip
    t.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT_S, help="seconds")
    c = p.add_argument_group("claims")
    c.add_argument(
        "--claims", type=_claims, default=list(CLAIMS), help=f"which run ({','.join(CLAIMS)})"
    )
    c.add_argument("--require-npu", action="store_true", help="a skipped NPU-only check fails")
    c.add_argument("--prompts", type=positive_int, default=None, help="first N built-in prompts")
    c.add_argument("--max-new-tokens", type=positive_int, default=None, help="cap every budget")
    c.add_argument(
        "--early-tokens", type=positive_int, default=EARLY_TOKENS,
        help="a divergence before this many tokens fails (%(default)s)",
    )  # fmt: skip
    c.add_argument("--eval", type=_text_file, default=None, help="GSM8K-format JSONL")
    c.add_argument("--eval-shots", type=non_negative_int, default=accuracy.DEFAULT_SHOTS)
    c.add_argument("--eval-limit", type=positive_int, default=None, help="score N questions")
    c.add_argument("--min-accuracy", type=unit_interval, default=None, help="0..1")
    c.add_argument("--concs", type=_int_list, default=[1, 5, 10], help='speed, e.g. "1 5 10"')
    c.add_argument("--num-prompts", type=positive_int, default=100, help="speed (%(default)s)")
    c.add_argument("--input-len", type=positive_int, default=1024, help="speed (%(default)s)")
    c.add_argument("--output-len", type=positive_int, default=100, help="speed (%(default)s)")
    c.add_argument("--repeats", type=positive_int, default=3, help="speed with --compare")
    c.add_argument("--baseline", type=_text_file, default=None, help="bench JSONL, not the PR's")
    c.add_argument("--ready-timeout", type=positive_float, default=60.0, help="speed, seconds")
    c.add_argument("--kernels", action="store_true", help="run the kernels claim")
    c.add_argument(
        "--kernel-batches", type=_int_list, default=list(KERNEL_BATCHES), help="1 32 128"
    )
    c.add_argument("--kernel-iters", type=positive_int, default=20, help="timed calls (NPU)")
    c.add_argument("--hbm-gbps", type=positive_float, default=None, help="the chip's HBM GB/s")
    p.add_argument("--output-dir", type=output_dir, default=Path(DEFAULT_OUTPUT_DIR))
    p.add_argument(
        "--print-report", action="store_true", help="report.md on stderr too (a pod's log)"
    )
    return p


def _guarded(name: str, run: Callable[[], Claim]) -> Claim:
    """A claim that raised still lands in the report, as a failure in one line."""
    try:
        return run()
    except Exception as exc:
        line = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return Claim(name, line, [Check.of(name, False, line)])


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    # Read every input before the first request: a bad file is exit 2, not a failed claim.
    try:
        api_key = args.api_key_file.read_text().strip() if args.api_key_file else ""
        if args.eval is not None:
            accuracy.load(args.eval, args.eval_shots)
        if args.baseline is not None:
            # lazy: a baseline is the bench's JSONL, read by the bench's reader
            from qwen_npu.loadtest.report import read_jsonl

            read_jsonl(str(args.baseline))
    except (accuracy.EvalError, ValueError, OSError) as exc:
        return fail(PROG, str(exc))
    args.output_dir.mkdir(parents=True, exist_ok=True)

    selected = set(args.claims)
    speed_blocked = None
    if "speed" in selected:
        # lazy: only a run with the speed claim loads the bench (locust before any socket)
        from qwen_npu.qualify.claims import speed

        speed_blocked = speed.prepare()
    target = Endpoint(args.target, api_key, args.timeout)
    other = Endpoint(args.compare, api_key, args.timeout) if args.compare else None
    sidecar = Endpoint(args.sidecar, timeout_s=10.0) if args.sidecar else None
    chosen = prompts.select(args.prompts, args.max_new_tokens)

    def not_selected(name: str) -> Claim:
        return skipped_claim(name, f"not selected (--claims {','.join(args.claims)})")

    def claim_module(name: str) -> Any:
        # lazy: each claim's libraries (the canary's, the bench's, torch) load when it runs
        return importlib.import_module(f"qwen_npu.qualify.claims.{name}")

    runs: dict[str, Callable[[], Claim]] = {
        "start": lambda: claim_module("start").run(
            target, sidecar, args.state_dir, args.engine_log, dict(args.record)
        ),
        "answers": lambda: claim_module("answers").run(target, chosen, other, args.early_tokens),
        "accuracy": lambda: (
            accuracy.run(
                target, args.eval, args.eval_shots, args.eval_limit, args.min_accuracy, other
            )
            if args.eval is not None
            else skipped_claim("accuracy", "no --eval FILE (a staged GSM8K-format JSONL)")
        ),
        "speed": lambda: (
            skipped_claim("speed", speed_blocked)
            if speed_blocked
            else claim_module("speed").run(
                args.target,
                args.concs,
                claim_module("speed").upstream_data(
                    args.num_prompts, args.input_len, args.output_len
                ),
                args.compare,
                args.repeats,
                args.baseline,
                args.ready_timeout,
            )
        ),
        "kernels": lambda: (
            claim_module("kernels").run(args.kernel_batches, args.kernel_iters, args.hbm_gbps)
            if args.kernels
            else skipped_claim(
                "kernels",
                "not asked: --kernels (in the engine image on an NPU; off it, "
                "under Triton's interpreter, not timed)",
                npu_only=True,
            )
        ),
    }
    claims = []
    for name in CLAIMS:
        if name not in selected:
            claims.append(not_selected(name))
            continue
        print(f"{PROG}: running the {name} claim", file=sys.stderr, flush=True)
        claims.append(_guarded(name, runs[name]))
    for endpoint in (target, other, sidecar):
        if endpoint is not None:
            endpoint.close()
    doc = report.document(claims, argv, args.require_npu)
    report.write(args.output_dir, doc)
    if args.print_report:
        print(report.markdown(doc), file=sys.stderr, flush=True)
    print(report.verdict_line(claims, args.require_npu, args.output_dir), flush=True)
    return exit_status(claims, args.require_npu)
