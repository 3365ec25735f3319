"""``qwen-npu dashboards``: regenerate (or check) the chart's dashboards and alert rules.

``make dashboards`` runs it with no arguments from the repository root; ``--check`` exits 1 when
the committed files differ from what the code generates (the test suite does the same check).
``--render-rules FILE`` instead renders the chart (``--chart``, ``--values``) and writes the alert
rules as deployed, as a plain Prometheus rule file (what ``make lint-observability`` checks).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qwen_npu.cli_parser import OneLineParser, input_dir, input_file, output_dir, output_file
from qwen_npu.log import PartLog
from qwen_npu.observability.config import DEFAULT_CHART, Config

log = PartLog("dashboards")

DEFAULT_OUT = DEFAULT_CHART / "files"


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="qwen-npu dashboards",
        description="Generate the Grafana dashboards (JSON) and Prometheus alert rules (YAML) "
        "that the chart ships under helm/qwen-npu/files/.",
    )
    p.add_argument(
        "--out",
        type=output_dir,
        default=None,
        help=f"the chart's files/ folder (default: <--chart>/files, {DEFAULT_OUT})",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when a committed file is stale or missing",
    )
    p.add_argument(
        "--render-rules",
        type=output_file,
        metavar="FILE",
        help="render the chart and write its alert rules (as deployed) to FILE, then exit",
    )
    p.add_argument(
        "--chart",
        type=input_dir,
        metavar="DIR",
        default=DEFAULT_CHART,
        help=f"the chart (values.yaml: the thresholds; --render-rules renders it); {DEFAULT_CHART}",
    )
    p.add_argument(
        "--values", type=input_file, metavar="FILE", help="values file for --render-rules"
    )
    p.add_argument("--namespace", default="default", help="release namespace for --render-rules")
    return p


def _render_rules(args: argparse.Namespace) -> int:
    # lazy: an extra's (pyproject.toml); the base install goes without
    import yaml

    # lazy: a verb loads only what it runs (--help and bad flags stay instant)
    from qwen_npu.observability.render import RenderError, load_values, render_rules

    try:
        spec = render_rules(args.chart, load_values(args.values), namespace=args.namespace)
    except RenderError as exc:
        print(f"qwen-npu dashboards: error: {exc}", file=sys.stderr)
        return 2
    out: Path = args.render_rules
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(spec, sort_keys=False, width=1000))
    groups = spec.get("groups", [])
    rules = sum(len(g.get("rules", [])) for g in groups)
    log(
        "info",
        "rendered",
        path=out,
        groups=len(groups),
        rules=rules,
        next=f"promtool check rules {out}",
    )
    return 0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.render_rules is not None:
        return _render_rules(args)
    # lazy: a verb loads only what it runs (--help and bad flags stay instant)
    from qwen_npu.observability import generate

    out: Path = args.out if args.out is not None else args.chart / "files"
    if not out.parent.is_dir():
        print(
            f"qwen-npu dashboards: error: {out.parent} is not a folder; run from the repository "
            "root or pass --out <chart>/files",
            file=sys.stderr,
        )
        return 2
    try:
        files = generate.render_files(Config(chart_dir=args.chart))
    except (ValueError, RuntimeError) as exc:
        print(f"qwen-npu dashboards: error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        problems = generate.stale(out, files)
        for rel in problems:
            log("error", "stale", path=out / rel, next="make dashboards")
        if problems:
            return 1
        log("info", "up_to_date", out=out, files=len(files))
        return 0
    written = generate.write(out, files)
    for path in written:
        log("info", "written", path=path)
    log("info", "done", out=out, files=len(files), changed=len(written))
    return 0
