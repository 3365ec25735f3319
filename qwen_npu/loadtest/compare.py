"""``qwen-npu bench-compare``: the same load against two endpoints, interleaved and repeated.

One number from each side is no answer on a shared machine, where other work moves every figure:
both sides get the same dataset and seed, the runs alternate so drift hits both, and a verdict is
given only beyond the spread of the repeats (compare_stats.py; docs/loadtest.md). mtp-tune and
qualify's speed claim run their sides through this module too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from qwen_npu.cli_parser import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    OneLineParser,
    fail,
    output_file,
    positive_int,
)
from qwen_npu.loadtest import cli
from qwen_npu.loadtest.compare_stats import Cell, crossover, format_pair, summarize
from qwen_npu.loadtest.progress import TargetNotReady, say
from qwen_npu.loadtest.report import append_jsonl
from qwen_npu.ports import ENGINE_PORT

PROG = "qwen-npu bench-compare"
IDENTITY = ("model (/v1/models)", "model_path (/model_info)", "tokenizer_path (/model_info)")
RunOne = Callable[[Any], tuple[dict[str, Any], bool]]


@dataclass(frozen=True)
class Side:
    label: str
    url: str


def _get_json(url: str) -> tuple[int, Any]:
    """(HTTP status or 0 for no answer, the JSON body or None)."""
    # lazy: urllib.request imports ssl, which locust (the runs, later) must patch before it loads
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return int(exc.code), None
    except (OSError, ValueError):
        return 0, None


def _path(value: Any) -> str | None:
    return str(value).rstrip("/") if value else None


def identity(side: Side) -> tuple[Any, ...]:
    """The side's models, model path and tokenizer path (IDENTITY); TargetNotReady when silent."""
    status, body = _get_json(side.url + "/v1/models")
    if status != 200 or not isinstance(body, dict):
        raise TargetNotReady(
            f"side {side.label} {side.url}: GET /v1/models gave "
            f"{f'HTTP {status}' if status else 'no answer'}; start the engine or the simulator "
            "there, or fix the URL (http://<host>:<port>, no path)"
        )
    models = tuple(sorted(str(m.get("id")) for m in body.get("data") or [] if isinstance(m, dict)))
    infos = (_get_json(side.url + path)[1] for path in ("/model_info", "/get_model_info"))
    info = next((i for i in infos if isinstance(i, dict)), {})
    return models, _path(info.get("model_path")), _path(info.get("tokenizer_path"))


def check_same_model(sides: Sequence[Side]) -> None:
    """ValueError when two sides serve different models or tokenizers."""
    ids = [identity(s) for s in sides]
    for side, ident in zip(sides[1:], ids[1:], strict=True):
        for what, mine, theirs in zip(IDENTITY, ids[0], ident, strict=True):
            if mine is not None and theirs is not None and mine != theirs:
                raise ValueError(
                    f"{sides[0].label} and {side.label} serve a different {what}: {mine!r} vs "
                    f"{theirs!r}; compare two deployments of the same checkpoint"
                )


def run_interleaved(
    sides: Sequence[Side],
    concs: Sequence[int],
    repeats: int,
    base: Any,
    run_one: RunOne,
    output: Path | None,
    compare_id: str,
) -> list[dict[str, Any]]:
    """Per concurrency, per repeat, each side in turn; every record appended to ``output``."""
    records: list[dict[str, Any]] = []
    for conc in concs:
        for rep in range(repeats):
            for side in sides:
                say("compare_run", conc=conc, repeat=f"{rep + 1}/{repeats}", side=side.label)
                config = replace(base, target=side.url, concurrency=conc, tag=side.label)
                record, interrupted = run_one(config)
                record.update(compare_id=compare_id, compare_label=side.label, compare_repeat=rep)
                records.append(record)
                if output is not None:
                    append_jsonl(output, record)
                if interrupted:
                    raise KeyboardInterrupt
    return records


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The flags bench-compare and mtp-tune share; the rest of a command line is the bench's."""
    rest = "Any further flag is a qwen-npu bench flag (dataset, API, ramp)."
    p = OneLineParser(prog=prog, description=f"{description} {rest}")
    p.add_argument("--concs", default="1 5 10 32", help='concurrencies, e.g. "1 5 10 32"')
    p.add_argument("--repeats", type=positive_int, default=3, help="runs per side and concurrency")
    name = prog.split()[-1].removeprefix("bench-")
    p.add_argument(
        "--output",
        type=output_file,
        default=f"out/bench/{name}.jsonl",
        help="JSONL history (%(default)s)",
    )
    return p


def bench_config(bench_args: Sequence[str], target: str, prog: str) -> Any:
    """The bench's own flags, validated by the bench's own parser (errors name ``prog``)."""
    p = cli.build_parser()
    p.prog = prog
    args = p.parse_args(["--target", target, *bench_args])
    for flag in ("sweep", "baseline", "output"):
        if getattr(args, flag):
            raise ValueError(f"--{flag} is a qwen-npu bench flag that {prog} sets itself")
    config = cli.config_from_args(args)
    # The flags are good: load locust now, its gevent monkey-patching before the first socket
    # (the endpoint probes), never for a command line that is refused.
    from qwen_npu.loadtest import runner  # noqa: F401

    return config


def run_and_report(
    prog: str,
    args: argparse.Namespace,
    sides: Sequence[Side],
    concs: list[int],
    base: Any,
    run_one: RunOne,
    tables: Callable[[dict[int, dict[str, Cell]], list[str], Path | None], str],
) -> int:
    """Run the sides interleaved, print ``tables(summary, labels, stem)`` and write the pictures.
    Exit 0 when every run passed, 1 when one failed or a side stopped answering, 130 on Ctrl-C."""
    output = Path(args.output) if args.output else None
    tag = f"{prog.split()[-1]}-{time.time():.0f}"
    try:
        records = run_interleaved(sides, concs, args.repeats, base, run_one, output, tag)
    except TargetNotReady as exc:
        return fail(prog, str(exc), EXIT_FAILED)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; the runs so far are in {output}", file=sys.stderr)
        return EXIT_INTERRUPTED
    labels = [s.label for s in sides]
    summary = summarize(records, labels)
    stem = output.with_suffix("") if output is not None else None
    text = tables(summary, labels, stem)
    if stem is not None and records:
        # lazy: matplotlib loads only when a picture is asked for
        from qwen_npu.loadtest.plots import write_compare_html, write_compare_png

        png = write_compare_png(summary, labels, f"{stem}.png")
        page = write_compare_html(summary, labels, text, png, f"{stem}.html")
        text += f"\n\nresults appended to {output}\npicture: {png}\nreport: {page}"
    print(text)
    return 0 if all(r.get("verdict") == "pass" for r in records) else 1


def _pair_tables(summary: dict[int, dict[str, Cell]], labels: list[str], _: Path | None) -> str:
    a, b = labels
    parts = [
        f"Concurrency {conc}\n{format_pair(cells, a, b)}"
        for conc, cells in sorted(summary.items())
        if a in cells and b in cells
    ]
    cross = crossover(summary, a, b)
    if cross is None:
        tail = f"{b} does not beat {a} in output tok/s beyond the spread at any measured CONC"
    else:
        tail = f"{b} beats {a} in output tok/s beyond the spread from CONC {cross}"
    return "\n\n".join([*parts, tail])


def main(argv: Sequence[str] | None = None) -> int:
    p = parser(PROG, "The same bench against two endpoints, interleaved and repeated.")
    p.add_argument("--a", required=True, help="side A's base URL")
    p.add_argument("--b", required=True, help="side B's base URL")
    p.add_argument("--label-a", default="A")
    p.add_argument("--label-b", default="B")
    args, rest = p.parse_known_args(argv)
    try:
        sides = [Side(args.label_a, args.a.rstrip("/")), Side(args.label_b, args.b.rstrip("/"))]
        if args.label_a == args.label_b:
            raise ValueError(f"--label-a and --label-b are both {args.label_a!r}; give two names")
        for side, flag in zip(sides, ("--a", "--b"), strict=True):
            if not side.url.startswith(("http://", "https://")):
                raise ValueError(
                    f"{flag} {side.url!r}: use a URL such as http://host:{ENGINE_PORT}"
                )
        concs = cli.parse_concs("--concs", args.concs)
        base = bench_config(rest, sides[0].url, PROG)
        check_same_model(sides)
    except TargetNotReady as exc:  # as qwen-npu bench: a target that does not answer is 1
        return fail(PROG, str(exc), EXIT_FAILED)
    except (ValueError, OSError) as exc:
        return fail(PROG, str(exc))
    return run_and_report(PROG, args, sides, concs, base, cli.run_one, _pair_tables)
