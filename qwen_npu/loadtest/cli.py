"""``qwen-npu bench``: run the load test, print the table, append the JSONL, compare a baseline.

Exit status (docs/loadtest.md): 0 all good, 1 failed requests, a regression or a target not
ready, 2 bad input, 130 interrupted (what was measured is still printed and written).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from qwen_npu.cli_parser import (
    EXIT_FAILED,
    OneLineParser,
    fail,
    non_negative_float,
    non_negative_int,
    output_file,
    positive_float,
    positive_int,
)
from qwen_npu.loadtest.baseline import compare, find_baseline, parse_thresholds
from qwen_npu.loadtest.config import BenchConfig, add_request_flags, data_from_args
from qwen_npu.loadtest.dataset import DATASETS, DEFAULT_VOCAB_SIZE
from qwen_npu.loadtest.metrics import calculate_metrics
from qwen_npu.loadtest.progress import TargetNotReady, say
from qwen_npu.loadtest.report import (
    append_jsonl,
    build_record,
    format_errors,
    format_table,
    read_jsonl,
)
from qwen_npu.ports import LOCAL_ENGINE_URL

PROG = "qwen-npu bench"


def build_parser() -> argparse.ArgumentParser:
    c = BenchConfig()
    p = OneLineParser(
        prog=PROG,
        description="Locust load test with sglang.benchmark.serving's dataset and metrics.",
    )
    p.add_argument("--target", default=LOCAL_ENGINE_URL, help="engine base URL (%(default)s)")
    add_request_flags(p)
    p.add_argument(
        "--concurrency", "-c", type=positive_int, default=c.concurrency, help="closed-loop users"
    )
    p.add_argument(
        "--sweep", default=None, help='run once per concurrency, e.g. "1 5 10" (overrides -c)'
    )
    p.add_argument("--dataset", default=c.dataset, choices=DATASETS)
    p.add_argument("--model", default=c.model, help="model name for API=openai")
    p.add_argument(
        "--workers", type=non_negative_int, default=c.workers, help="locust worker processes"
    )
    p.add_argument(
        "--output", type=output_file, default=None, help="JSONL file to append one line per run to"
    )
    p.add_argument(
        "--baseline",
        metavar="FILE",
        default=None,
        help="JSONL with earlier runs to compare against",
    )
    p.add_argument("--threshold", action="append", default=[], help="key=percent (repeatable)")
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up request")
    p.add_argument(
        "--ready-timeout", type=positive_float, default=c.ready_timeout_s, help="seconds"
    )
    p.add_argument(
        "--ramp-ms-per-user",
        type=non_negative_float,
        default=c.ramp_ms_per_user,
        help="users start this many ms apart (%(default)s; 0 = all at once)",
    )
    p.add_argument("--tag", default=None, help="free text stored in the JSONL line")
    return p


def parse_concs(flag: str, text: str) -> list[int]:
    """``"1 5 10"`` (or commas): the concurrencies, sorted, each once."""
    try:
        values = [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise ValueError(f'{flag} "{text}": use integers, e.g. {flag} "1 5 10"') from None
    if not values or min(values) < 1:
        raise ValueError(f'{flag} "{text}": give concurrencies of 1 or more, e.g. "1 5 10"')
    return sorted(set(values))


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """Validate the flags into a config; bad values raise ValueError with the fix."""
    if not args.target.startswith(("http://", "https://")):
        raise ValueError(f"--target {args.target}: use a URL such as {LOCAL_ENGINE_URL}")
    return BenchConfig(
        target=args.target.rstrip("/"),
        api=args.api,
        concurrency=args.concurrency,
        data=data_from_args(args),
        model=args.model,
        workers=args.workers,
        dataset=args.dataset,
        warmup=not args.no_warmup,
        ready_timeout_s=args.ready_timeout,
        ramp_ms_per_user=args.ramp_ms_per_user,
        tag=args.tag,
    )


def run_one(config: BenchConfig) -> tuple[dict[str, Any], bool]:
    """One measured run as a JSONL record, and whether it was interrupted."""
    from qwen_npu.loadtest import runner  # imports locust (gevent monkey-patching): only here

    result = runner.run(config)
    record = build_record(
        config,
        calculate_metrics(result.outputs, result.duration_s),
        accept_length=result.accept_length,
        server_info=result.server_info,
        interrupted=result.interrupted,
    )
    return record, result.interrupted


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
        concs = [args.concurrency] if args.sweep is None else parse_concs("--sweep", args.sweep)
        thresholds = parse_thresholds(args.threshold)
        if args.baseline and not Path(args.baseline).is_file():
            raise ValueError(
                f"--baseline {args.baseline}: no such file; pass a JSONL an earlier bench wrote "
                "(--output; make bench: out/bench/bench.jsonl) or drop --baseline"
            )
        baseline_records = read_jsonl(args.baseline) if args.baseline else None
    except (ValueError, OSError) as exc:
        return fail(PROG, str(exc))

    if not args.tokenizer and args.vocab_size is None:
        say(
            "note",
            vocab_size=f"{DEFAULT_VOCAB_SIZE} (default)",
            what="token ids match sglang.benchmark.serving's only for a tokenizer of that size",
            next="pass TOKENIZER=<dir>",
        )
    records: list[dict[str, Any]] = []
    interrupted = False
    for conc in concs:
        try:
            record, interrupted = run_one(replace(config, concurrency=conc))
        except TargetNotReady as exc:
            return fail(PROG, str(exc), EXIT_FAILED)
        records.append(record)
        if args.output:
            append_jsonl(args.output, record)
        if interrupted:
            say("interrupted", what="the table below holds what was measured")
            break

    print(format_table(records))
    for rec in records:
        if errors := format_errors(rec):
            print(f"Concurrency {rec['max_concurrency']}:\n{errors}")
    if args.output:
        print(f"results appended to {args.output}")
        if len(records) > 1:
            # lazy: matplotlib loads only when a picture is asked for
            from qwen_npu.loadtest.plots import write_html, write_png

            stem = Path(args.output).with_suffix("")
            png = write_png(records, f"{stem}.png")
            page = write_html(records, png, f"{stem}.html")
            print(f"sweep picture: {png}\nsweep report: {page}")

    status = 1 if any(r["verdict"] != "pass" for r in records) else 0
    if baseline_records is not None:
        for rec in records:
            status = max(
                status, _against_baseline(baseline_records, rec, thresholds, args.baseline)
            )
    if interrupted:
        return 130
    verdicts = ",".join(f"{r['max_concurrency']}:{r['verdict']}" for r in records)
    say("done", verdicts=verdicts, exit=status)
    return status


def _against_baseline(
    baseline_records: list[dict[str, Any]],
    rec: dict[str, Any],
    thresholds: dict[str, float],
    path: str,
) -> int:
    base = find_baseline(baseline_records, rec)
    if base is None:
        print(
            f"baseline: no line in {path} at concurrency {rec['max_concurrency']} with "
            f"{rec['random_input_len']} in / {rec['random_output_len']} out; nothing compared"
        )
        return 0
    findings = compare(base, rec, thresholds)
    print(f"baseline comparison (concurrency {rec['max_concurrency']}, {path}):")
    print("\n".join(f.line() for f in findings))
    if bad := [f.key for f in findings if f.regressed]:
        print(f"baseline: REGRESSION in {', '.join(bad)}")
        return 1
    return 0
