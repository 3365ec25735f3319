"""A simulator profile's engine facts, from the chart's own render of the engine it stands for.

Why this exists: a calibrated profile simulates one deployment of the chart (a checkpoint
profile, MTP on or off). What that engine is told (the served model name, the tensor-parallel
size, the speculative algorithm, its steps, top-k and draft tokens) is written once, in the chart
profile, and the chart renders it into the engine's command line. A simulator profile names the
chart profile (``chart-profile:``, plus ``chart-values:`` on top, e.g. MTP off) and takes those
flags from the render (Helm's Go SDK, offline, through helm-python-sdk): the simulator's keys are
named after the same SGLang flags. Only its timing model stays in the simulator profile.

The chart lives in the repository (helm/qwen-npu), beside this package in a checkout, which is
where the simulator runs (tests, ``make demo``, ``make perf-sim``, ``make mtp-tune``).
"""

from __future__ import annotations

import copy
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


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@cache
def _engine_args(profile: str, values_json: str) -> tuple[str, ...]:
    """The engine container's args the chart renders for ``profile`` + values (cached)."""
    import yaml

    path = CHART_DIR / "profiles" / f"{profile}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in (CHART_DIR / "profiles").glob("*.yaml")))
        raise ChartProfileError(
            f"chart-profile {profile!r}: no {path}; use one of: {known or 'none (no chart here)'}"
        )
    try:
        import helm_python as helm
    except ImportError:
        raise ChartProfileError(
            f"chart-profile {profile!r}: rendering the chart needs helm-python-sdk; run make setup"
        ) from None
    values = _merge(yaml.safe_load(path.read_text()) or {}, json.loads(values_json))
    try:
        rendered = helm.Chart.load(CHART_DIR).render(values, name="qwen-npu", namespace="default")
    except helm.HelmError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        msg = f"chart-profile {profile!r}: the chart does not render: {first}"
        raise ChartProfileError(msg) from None
    for name, text in rendered.items():
        for doc in yaml.safe_load_all(text) if name.endswith(".yaml") else ():
            if not doc or doc.get("kind") not in ("Deployment", "LeaderWorkerSet"):
                continue
            if not doc["metadata"]["name"].endswith("-engine"):
                continue
            spec = doc["spec"]
            template = spec["template"] if "template" in spec else (
                spec["leaderWorkerTemplate"]["leaderTemplate"]
            )  # fmt: skip
            for c in template["spec"]["containers"]:
                if c["name"] == "engine":
                    return tuple(str(a) for a in c["args"])
    raise ChartProfileError(f"chart-profile {profile!r}: the render has no engine container")


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
