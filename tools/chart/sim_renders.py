"""The chart's renders that the simulator's chart-backed profiles read (``QWEN_NPU_CHART_RENDERS``).

Why this exists: a simulator profile names a chart profile (``chart-profile:``, ``chart-values:``)
instead of restating the engine's flags; the package cannot render the chart, so this writes the
engine's args for every such profile (the packaged ones and any ``--sim-config`` given) into one
JSON file that ``qwen_npu.sim.chart_engine`` reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from qwen_npu.sim.chart_engine import render_key
from tools.chart import PROFILES_DIR, engine_args, render_docs, values_from
from tools.paths import SIM_PROFILES


def chart_profiles_of(configs: Iterable[Path]) -> list[tuple[str, dict[str, Any]]]:
    """(chart profile, chart values) of every simulator YAML that names one."""
    found = []
    for path in configs:
        data = yaml.safe_load(path.read_text()) or {}
        if isinstance(data, dict) and data.get("chart-profile"):
            found.append((str(data["chart-profile"]), dict(data.get("chart-values") or {})))
    return found


def renders(extra: Iterable[Path] = ()) -> dict[str, list[str]]:
    """render_key -> the engine's args, for the packaged profiles and ``extra`` configs."""
    out: dict[str, list[str]] = {}
    for profile, values in chart_profiles_of([*sorted(SIM_PROFILES.glob("*.yaml")), *extra]):
        path = PROFILES_DIR / f"{profile}.yaml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
            raise SystemExit(
                f"sim-renders: chart-profile {profile!r}: no {path}; use one of: {known}"
            )
        out[render_key(profile, values)] = engine_args(render_docs(values_from(path, extra=values)))
    return out


def write(out: Path, extra: Iterable[Path] = ()) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    doc = {
        "profiles": sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")),
        "renders": renders(extra),
    }
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(out)
    return out
