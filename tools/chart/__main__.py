"""`python -m tools.chart render|package|sim-renders|engine-args`: behind `make chart`,
`make chart-package`, `make sim-renders` and `make verify-patches`."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import helm_python as helm
import yaml

from qwen_npu.sim.chart_engine import PACKAGED
from tools.chart import (
    PROFILES_DIR,
    documents,
    engine_args,
    lint,
    profiles,
    render,
    render_docs,
    scenarios,
    sim_renders,
    values_from,
)
from tools.paths import CHART_DIR, REPO
from tools.versions import read_versions


def _render_all(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name, values in scenarios().items():
        try:
            rendered = render(values)
        except helm.HelmError as exc:
            print(f"chart: scenario={name} status=render-failed error={exc}")
            failed += 1
            continue
        findings = lint(values)
        docs = documents(rendered)
        manifest = "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)
        (out / f"{name}.yaml").write_text(manifest)
        status = "ok" if not findings else "lint-findings"
        failed += bool(findings)
        print(f"chart: scenario={name} status={status} objects={len(docs)}")
        for finding in findings:
            print(f"chart:   lint {finding}")
    print(f"chart: rendered={out} failed={failed} next=`make checkov` or kubectl apply --dry-run")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.chart", description=__doc__.splitlines()[0]
    )
    parser.add_argument("action", choices=["render", "package", "sim-renders", "engine-args"])
    parser.add_argument(
        "--out", type=Path, help="default: out/chart (sim-renders: the package's data file)"
    )
    parser.add_argument(
        "--sim-config",
        type=Path,
        action="append",
        default=[],
        help="sim-renders: a simulator YAML of your own that names a chart-profile",
    )
    parser.add_argument(
        "--profile",
        default="qwen3.6-35b-a3b-w8a8",
        help="engine-args: the chart profile whose engine command line to print (shell-quoted)",
    )
    args = parser.parse_args(argv)
    if args.action == "engine-args":
        path = PROFILES_DIR / f"{args.profile}.yaml"
        if not path.is_file():
            known = ", ".join(p.stem for p in profiles())
            print(f"chart: no profile {args.profile!r}; use one of: {known}", file=sys.stderr)
            return 2
        print(shlex.join(engine_args(render_docs(values_from(path)))))
        return 0
    if args.action == "sim-renders":
        if not args.sim_config and args.out is None:  # the packaged profiles' renders (make)
            print(f"chart: sim-renders={sim_renders.write(PACKAGED)}")
            return 0
        out = args.out or REPO / "out" / "chart"
        out = out if out.suffix == ".json" else out / "sim-renders.json"
        written = sim_renders.write(out, args.sim_config)
        print(f"chart: sim-renders={written} next=export QWEN_NPU_CHART_RENDERS={written}")
        return 0
    out = args.out or REPO / "out" / "chart"
    if args.action == "render":
        return _render_all(out)
    out.mkdir(parents=True, exist_ok=True)
    # appVersion (the images' tag) from docker/versions.env at package time, its one home
    app_version = read_versions()["QWEN_NPU_VERSION"]
    archive = helm.package(CHART_DIR, destination=out, app_version=app_version)
    print(f"chart: packaged={archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
