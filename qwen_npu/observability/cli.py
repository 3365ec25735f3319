"""``qwen-npu dashboards``: regenerate (or ``--check``) the chart's dashboards and alert rules;
``--render-rules FILE`` writes the rules as the chart deploys them, a plain Prometheus rule file
(what ``make lint-observability`` runs promtool on, and what a Prometheus without the Operator
loads).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from qwen_npu.cli_parser import OneLineParser, fail, input_dir, input_file, output_dir, output_file
from qwen_npu.log import PartLog
from qwen_npu.observability.config import DEFAULT_CHART, Config

PROG = "qwen-npu dashboards"
RULE_TEMPLATE = "templates/prometheusrule.yaml"
log = PartLog("dashboards")

DEFAULT_OUT = DEFAULT_CHART / "files"


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
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
    """The rules as the chart deploys them, rendered by Helm's Go SDK (offline, no cluster)."""
    path: Path | None = args.values
    try:
        values = yaml.safe_load(path.read_text()) if path is not None else None
    except (OSError, yaml.YAMLError) as exc:
        return fail(PROG, f"{path}: cannot read values ({exc}); pass a YAML mapping")
    if values is not None and not isinstance(values, dict):
        return fail(PROG, f"{path}: values must be a YAML mapping at the top level")
    try:
        # lazy: an extra's (pyproject.toml); the base install goes without
        from helm_python import Chart, HelmError
    except ImportError as exc:
        return fail(
            PROG,
            f"helm-python-sdk is not installed ({exc}); run make setup or pip install "
            "'qwen-npu[dev]'",
        )
    chart: Path = args.chart
    try:
        rendered = Chart.load(str(chart)).render(
            values or {}, name="qwen-npu", namespace=args.namespace
        )
    except HelmError as exc:
        return fail(PROG, f"{chart}: helm render failed: {exc}")
    docs = [d for d in yaml.safe_load_all(rendered.get(f"{chart.name}/{RULE_TEMPLATE}", "")) if d]
    if not docs:
        enable = "monitoring.prometheusRule.enabled=true"
        return fail(PROG, f"{chart}: {RULE_TEMPLATE} rendered nothing; set {enable}")
    spec: dict[str, Any] = docs[0]["spec"]
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
        return fail(
            PROG,
            f"{out.parent} is not a folder; run from the repository root or pass --out "
            "<chart>/files",
        )
    try:
        files = generate.render_files(Config(chart_dir=args.chart))
    except (ValueError, RuntimeError) as exc:
        return fail(PROG, str(exc))
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
