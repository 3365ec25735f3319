"""A simulator profile's engine facts, from the chart's own render of the engine it stands for.

Why this exists: a calibrated profile simulates one deployment of the chart (a checkpoint
profile, MTP on or off). What that engine is told (the served model name, the tensor-parallel
size, the speculative algorithm, its steps, top-k and draft tokens) is written once, in the chart
profile, and the chart renders it into the engine's command line. A simulator profile names the
chart profile (``chart-profile:``, plus ``chart-values:`` on top, e.g. MTP off) and takes those
flags from the render (tools/chart.py: Helm's Go SDK, offline, through helm-python-sdk): the
simulator's keys are named after the same SGLang flags. Only its timing model stays in the
simulator profile.

The chart lives in the repository (helm/qwen-npu), beside this package in a checkout, which is
where the simulator runs (tests, ``make demo``, ``make perf-sim``, ``make mtp-tune``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

CHART_DIR = Path(__file__).resolve().parents[3] / "helm" / "qwen-npu"
#: Simulator keys that are SGLang engine flags the chart renders.
ENGINE_FLAGS = (
    "served-model-name",
    "tp-size",
    "speculative-algorithm",
    "speculative-num-steps",
    "speculative-eagle-topk",
    "speculative-num-draft-tokens",
)


class ChartProfileError(ValueError):
    """The chart profile cannot be read or rendered; the message names it and the fix."""


@cache
def _engine_args(profile: str, values_json: str) -> tuple[str, ...]:
    """The engine container's args the chart renders for ``profile`` + values (cached)."""
    path = CHART_DIR / "profiles" / f"{profile}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in (CHART_DIR / "profiles").glob("*.yaml")))
        raise ChartProfileError(
            f"chart-profile {profile!r}: no {path}; use one of: {known or 'none (no chart here)'}"
        )
    try:  # the repository's chart tool (tools/chart.py: helm-python-sdk), in a checkout
        import helm_python as helm

        from tools import chart
    except ImportError:
        raise ChartProfileError(
            f"chart-profile {profile!r}: rendering the chart needs a checkout with make setup "
            "(tools/chart.py, helm-python-sdk)"
        ) from None
    try:
        docs = chart.render_docs(chart.values_from(path, extra=json.loads(values_json)))
        return tuple(chart.engine_args(docs))
    except (helm.HelmError, AssertionError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        msg = f"chart-profile {profile!r}: the chart does not render its engine: {first}"
        raise ChartProfileError(msg) from None


def engine_keys(profile: str, values: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The simulator keys of ``ENGINE_FLAGS`` as the chart renders them (kebab-case -> text);
    no speculative flag rendered (MTP off) is ``speculative-algorithm: none``."""
    args = _engine_args(profile, json.dumps(values or {}, sort_keys=True))
    found: dict[str, str] = {"speculative-algorithm": "none"}
    for i, arg in enumerate(args[:-1]):
        key = arg.removeprefix("--")
        if arg.startswith("--") and key in ENGINE_FLAGS and not args[i + 1].startswith("--"):
            found[key] = args[i + 1]
    return found
