"""A simulator profile's engine facts, from the chart's own render of the engine it stands for.

Why this exists: a calibrated profile simulates one deployment of the chart (a checkpoint
profile, MTP on or off). What that engine is told (the served model name, the tensor-parallel
size, the speculative algorithm, its steps, top-k and draft tokens) is written once, in the chart
profile, and the chart renders it into the engine's command line. A simulator profile names the
chart profile (``chart-profile:``, plus ``chart-values:`` on top, e.g. MTP off) and takes those
flags from the render: the simulator's keys are named after the same SGLang flags. Only its
timing model stays in the simulator profile.

The package does not render the chart (the chart lives in a checkout, and Helm's SDK is a tool of
the repository, not of the product): its caller hands it the renders, a JSON file named by
``QWEN_NPU_CHART_RENDERS`` that ``python -m tools.chart sim-renders`` writes (``make sim``,
``make demo`` and the tests do this before they start a simulator).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

#: The environment variable naming the renders file.
ENV_RENDERS = "QWEN_NPU_CHART_RENDERS"
#: Simulator keys that are SGLang engine flags the chart renders.
ENGINE_FLAGS = (
    "served-model-name",
    "tp-size",
    "speculative-algorithm",
    "speculative-num-steps",
    "speculative-eagle-topk",
    "speculative-num-draft-tokens",
)
HOW_TO_RENDER = (
    "run `make sim-renders` in a checkout (python -m tools.chart sim-renders --out FILE "
    "[--sim-config YOUR.yaml]) and set " + ENV_RENDERS + "=FILE"
)


class ChartProfileError(ValueError):
    """The chart profile's render is not at hand; the message names it and the fix."""


def render_key(profile: str, values: Mapping[str, Any]) -> str:
    """How a (chart profile, chart values) pair is looked up in the renders file."""
    return f"{profile} {json.dumps(dict(values), sort_keys=True)}"


@cache
def _renders(path: str) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """(render_key -> engine args, the chart's profile names) of a renders file."""
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
        found = {str(k): tuple(str(a) for a in v) for k, v in data["renders"].items()}
        return found, tuple(str(p) for p in data.get("profiles", ()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ChartProfileError(
            f"{ENV_RENDERS}={path}: not a renders file ({exc}); {HOW_TO_RENDER}"
        ) from None


def engine_args(profile: str, values: Mapping[str, Any]) -> tuple[str, ...]:
    """The engine container's args the chart rendered for ``profile`` + ``values``."""
    path = os.environ.get(ENV_RENDERS, "")
    if not path:
        raise ChartProfileError(
            f"chart-profile {profile!r}: the engine's flags come from the chart's render, which "
            f"is not at hand ({ENV_RENDERS} is not set); {HOW_TO_RENDER}"
        )
    renders, profiles = _renders(path)
    found = renders.get(render_key(profile, values))
    if found is None and profiles and profile not in profiles:
        raise ChartProfileError(
            f"chart-profile {profile!r}: the chart has no such profile; use one of: "
            + ", ".join(profiles)
        )
    if found is None:
        raise ChartProfileError(
            f"chart-profile {profile!r} with chart-values {dict(values)}: not in {path}; "
            f"{HOW_TO_RENDER}"
        )
    return found


def engine_keys(profile: str, values: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The simulator keys of ``ENGINE_FLAGS`` as the chart renders them (kebab-case -> text);
    no speculative flag rendered (MTP off) is ``speculative-algorithm: none``."""
    return keys_from_args(engine_args(profile, values or {}))


def keys_from_args(args: Sequence[str]) -> dict[str, str]:
    """``ENGINE_FLAGS`` read from an engine command line."""
    found: dict[str, str] = {"speculative-algorithm": "none"}
    for i, arg in enumerate(args[:-1]):
        key = arg.removeprefix("--")
        if arg.startswith("--") and key in ENGINE_FLAGS and not args[i + 1].startswith("--"):
            found[key] = args[i + 1]
    return found
