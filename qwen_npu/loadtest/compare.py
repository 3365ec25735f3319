"""``make bench-compare``: the same load against two endpoints, interleaved and repeated.

Does MTP pay off, is the new release faster: one number from each side is not an answer on a
shared machine, where a burst of other work moves every figure. So both sides get the same
dataset and seed, the runs alternate (A, B, A, B ... per concurrency and repeat) so that drift
hits both, and each concurrency is repeated; the table shows each figure's median with its range
over the repeats and gives a verdict only where the ranges do not overlap (compare_stats.py).
Beside the figures: each engine's accept length from its own counters over each run.

Before anything runs, both sides must answer and serve the same model and tokenizer
(``/v1/models``, ``/model_info`` or ``/get_model_info``); otherwise one line: exit 1 for a side
that does not answer (as ``qwen-npu bench``), 2 for two different models.

Usage: ``qwen-npu bench-compare --a URL --b URL [--label-a L] [--label-b L]
[--concs "1 5 10 32"] [--repeats 3] [--output FILE.jsonl] [any qwen-npu bench flag]``. Writes the
JSONL history (one line per run), ``<stem>.png`` and ``<stem>.html``.
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
from qwen_npu.loadtest.compare_stats import crossover, format_pair, summarize
from qwen_npu.loadtest.progress import TargetNotReady, say
from qwen_npu.loadtest.report import append_jsonl
from qwen_npu.ports import ENGINE_PORT

DEFAULT_OUTPUT = "out/bench/compare.jsonl"
PROG = "qwen-npu bench-compare"


class CompareError(ValueError):
    """Bad input for a comparison; the message is one line naming the side and the fix."""


@dataclass(frozen=True)
class Side:
    """One endpoint under comparison."""

    label: str
    url: str


@dataclass(frozen=True)
class Identity:
    """What a side says it serves."""

    models: tuple[str, ...]
    model_path: str | None
    tokenizer_path: str | None


def _get_json(url: str, timeout_s: float) -> tuple[int, Any]:
    # lazy: urllib.request imports ssl, which locust (the runs, later) must patch before it loads
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return int(resp.status), json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return int(exc.code), None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


def identity(side: Side, timeout_s: float = 5.0) -> Identity:
    """The side's models and model/tokenizer paths; CompareError when it does not answer."""
    status, body = _get_json(side.url + "/v1/models", timeout_s)
    if status != 200 or not isinstance(body, dict):
        what = f"HTTP {status}" if status else "no answer"
        raise TargetNotReady(
            f"side {side.label} {side.url}: GET /v1/models gave {what}; start the engine or the "
            "simulator there, or fix the URL (http://<host>:<port>, no path)"
        )
    models = tuple(sorted(str(m.get("id")) for m in body.get("data") or [] if isinstance(m, dict)))
    info: dict[str, Any] = {}
    for path in ("/model_info", "/get_model_info"):
        status, data = _get_json(side.url + path, timeout_s)
        if status == 200 and isinstance(data, dict):
            info = data
            break
    return Identity(models, _path(info.get("model_path")), _path(info.get("tokenizer_path")))


def _path(value: Any) -> str | None:
    return str(value).rstrip("/") if value else None


def check_same_model(sides: Sequence[Side], ids: Sequence[Identity]) -> None:
    """CompareError when two sides serve different models or tokenizers."""
    first, ref = sides[0], ids[0]
    for side, ident in zip(sides[1:], ids[1:], strict=True):
        for what, mine, theirs in (
            ("model (/v1/models)", ref.models, ident.models),
            ("model_path (/model_info)", ref.model_path, ident.model_path),
            ("tokenizer_path (/model_info)", ref.tokenizer_path, ident.tokenizer_path),
        ):
            if mine is not None and theirs is not None and mine != theirs:
                raise CompareError(
                    f"{first.label} and {side.label} serve a different {what}: {mine!r} vs "
                    f"{theirs!r}; compare two deployments of the same checkpoint"
                )


def parse_concs(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise CompareError(f'--concs "{text}": use integers, e.g. --concs "1 5 10 32"') from None
    if not values or min(values) < 1:
        raise CompareError(f'--concs "{text}": give one or more concurrencies >= 1')
    return sorted(set(values))


RunOne = Callable[[Any], tuple[dict[str, Any], bool]]


def run_sides(
    prog: str, output: Path | None, runs: Callable[[], list[dict[str, Any]]]
) -> list[dict[str, Any]] | int:
    """``runs()`` (a ``run_interleaved``) for a command line: the records, or the exit code when a
    side was not ready (1, one line naming it) or the run was interrupted (130, where the runs so
    far are)."""
    try:
        return runs()
    except TargetNotReady as exc:
        return fail(prog, str(exc), EXIT_FAILED)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; the runs so far are in {output}", file=sys.stderr)
        return EXIT_INTERRUPTED


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
                record.update(
                    compare_id=compare_id,
                    compare_label=side.label,
                    compare_repeat=rep,
                )
                records.append(record)
                if output is not None:
                    append_jsonl(output, record)
                if interrupted:
                    raise KeyboardInterrupt
    return records


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="The same bench against two endpoints, interleaved and repeated. Any "
        "further flag is a qwen-npu bench flag (dataset, API, ramp).",
    )
    p.add_argument("--a", required=True, help="side A's base URL")
    p.add_argument("--b", required=True, help="side B's base URL")
    p.add_argument("--label-a", default="A")
    p.add_argument("--label-b", default="B")
    p.add_argument("--concs", default="1 5 10 32", help='concurrencies, e.g. "1 5 10 32"')
    p.add_argument("--repeats", type=positive_int, default=3, help="runs per side and concurrency")
    p.add_argument(
        "--output", type=output_file, default=DEFAULT_OUTPUT, help="JSONL history (%(default)s)"
    )
    return p


def bench_config(bench_args: Sequence[str], target: str, prog: str = PROG) -> Any:
    """The bench's own flags, validated by the bench's own parser (errors name ``prog``)."""

    parser = cli.build_parser()
    parser.prog = prog
    args = parser.parse_args(["--target", target, *bench_args])
    for flag in ("sweep", "baseline", "output"):
        if getattr(args, flag):
            raise CompareError(f"--{flag} is a qwen-npu bench flag that {prog} sets itself")
    config = cli.config_from_args(args)
    # The flags are good: load locust now, its gevent monkey-patching before the first socket
    # (the endpoint probes), never for a command line that is refused.
    from qwen_npu.loadtest import runner  # noqa: F401

    return config


def report(
    records: list[dict[str, Any]], sides: Sequence[Side], output: Path | None
) -> tuple[str, int | None]:
    """The printed tables (one per concurrency) and the crossover of B over A."""
    labels = [s.label for s in sides]
    summary = summarize(records, labels)
    a, b = labels
    parts = []
    for conc, cells in sorted(summary.items()):
        if a in cells and b in cells:
            parts.append(f"Concurrency {conc}\n{format_pair(cells, a, b)}")
    cross = crossover(summary, a, b)
    tail = (
        f"{b} beats {a} in output tok/s beyond the spread from CONC {cross}"
        if cross is not None
        else f"{b} does not beat {a} in output tok/s beyond the spread at any measured CONC"
    )
    text = "\n\n".join(parts) + "\n\n" + tail
    if output is not None and records:
        # lazy: matplotlib loads only when a picture is asked for
        from qwen_npu.loadtest.plots import write_compare_html, write_compare_png

        stem = output.with_suffix("")
        png = write_compare_png(summary, labels, f"{stem}.png")
        page = write_compare_html(summary, labels, text, png, f"{stem}.html")
        text += f"\nresults appended to {output}\npicture: {png}\nreport: {page}"
    return text, cross


def main(argv: Sequence[str] | None = None) -> int:
    args, rest = build_parser().parse_known_args(argv)
    from qwen_npu.loadtest import cli  # light: locust comes with bench_config, once flags are good

    try:
        sides = [Side(args.label_a, args.a.rstrip("/")), Side(args.label_b, args.b.rstrip("/"))]
        if sides[0].label == sides[1].label:
            raise CompareError(
                f"--label-a and --label-b are both {sides[0].label!r}; give two names"
            )
        for side, flag in zip(sides, ("--a", "--b"), strict=True):
            if not side.url:
                raise CompareError(f"{flag} is empty; give both: --a <url> --b <url>")
            if not side.url.startswith(("http://", "https://")):
                raise CompareError(
                    f"{flag} {side.url}: use a URL such as http://host:{ENGINE_PORT}"
                )
        concs = parse_concs(args.concs)
        base = bench_config(rest, sides[0].url)
        check_same_model(sides, [identity(s) for s in sides])
    except TargetNotReady as exc:  # as qwen-npu bench: a target that does not answer is 1
        return fail(PROG, str(exc), EXIT_FAILED)
    except (CompareError, ValueError, OSError) as exc:
        return fail(PROG, str(exc))

    output = Path(args.output) if args.output else None
    tag = f"compare-{time.time():.0f}"
    records = run_sides(
        PROG,
        output,
        lambda: run_interleaved(sides, concs, args.repeats, base, cli.run_one, output, tag),
    )
    if isinstance(records, int):
        return records
    text, _ = report(records, sides, output)
    print(text)
    return 0 if all(r.get("verdict") == "pass" for r in records) else 1


if __name__ == "__main__":  # the CLI's edge too: qwen-npu bench-compare
    from qwen_npu.cli import main as cli_main

    raise SystemExit(cli_main(["bench-compare", *sys.argv[1:]]))
