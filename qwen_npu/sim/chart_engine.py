"""A simulator profile's engine facts (model name, TP, speculative flags), from the chart's render.

They are written once, in the chart profile a simulator profile names (``chart-profile:``, plus
``chart-values:``); only the timing model stays in the simulator profile. The package does not
render the chart: the packaged profiles' renders ship as data (``profiles/chart-renders.json``,
``make sim-renders``); a YAML of your own naming another chart profile needs a renders file of
its own, named by ``QWEN_NPU_CHART_RENDERS`` (read first).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

#: The environment variable naming a renders file of the caller's (read before the packaged one).
ENV_RENDERS = "QWEN_NPU_CHART_RENDERS"
#: The packaged profiles' renders (package data, derived: ``make sim-renders`` writes it).
PACKAGED = Path(__file__).with_name("profiles") / "chart-renders.json"
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
    "in a checkout, `python -m tools.chart sim-renders --sim-config YOUR.yaml --out FILE` renders "
    f"it, then set {ENV_RENDERS}=FILE (`make sim-renders` rewrites the packaged renders)"
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
        raise ChartProfileError(f"{path}: not a renders file ({exc}); {HOW_TO_RENDER}") from None


def engine_keys(profile: str, values: Mapping[str, Any]) -> dict[str, str]:
    """The simulator keys of ``ENGINE_FLAGS`` as the chart rendered them for ``profile`` +
    ``values`` (kebab-case -> text); no speculative flag rendered (MTP off) is ``none``."""
    key = render_key(profile, values)
    path = os.environ.get(ENV_RENDERS, "")
    profiles: tuple[str, ...] = ()
    for file in [path, str(PACKAGED)] if path else [str(PACKAGED)]:
        renders, profiles = _renders(file)
        if key in renders:
            args = renders[key]
            found = {"speculative-algorithm": "none"}
            for flag, value in itertools.pairwise(args):
                name = flag.removeprefix("--")
                if flag.startswith("--") and name in ENGINE_FLAGS and not value.startswith("--"):
                    found[name] = value
            return found
    if profiles and profile not in profiles:
        raise ChartProfileError(
            f"chart-profile {profile!r}: the chart has no such profile; use one of: "
            + ", ".join(profiles)
        )
    where = (
        f"{path} or the packaged renders" if path else f"the packaged ones ({ENV_RENDERS} unset)"
    )
    raise ChartProfileError(
        f"chart-profile {profile!r} with chart-values {dict(values)}: not in {where}; "
        f"{HOW_TO_RENDER}"
    )
