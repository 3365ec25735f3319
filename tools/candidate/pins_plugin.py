"""A pytest plugin: the patches' ``PINS`` point at the candidate SGLang's code for the test run.

Why: ``make sglang-candidate`` runs each patch's own tests against a candidate release to
tell a target that changed only where the patch does not care (re-pin: the tests pass) from one
the patch no longer fits (port: they fail). With the pinned release's fingerprints the drift
guard would refuse every changed target and every such test would fail for that reason alone, so
the run's ``PINS`` are the candidate's (``QWEN_NPU_CANDIDATE_PINS``: a JSON file written by the
parent, ``{patch module: [{module, qualname, params, fingerprint}, ...]}``). Loaded only with
``-p tools.candidate.pins_plugin``; nothing in the engine reads the variable.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest

from qwen_npu.patches import core
from tools.candidate import ENV_PINS


def candidate_pins(path: Path) -> dict[str, tuple[core.Pin, ...]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return {
        module: tuple(
            core.Pin(p["module"], p["qualname"], tuple(p["params"]), p["fingerprint"]) for p in pins
        )
        for module, pins in data.items()
    }


def _repin() -> bool:
    path = os.environ.get(ENV_PINS)
    if not path:
        return False
    for module_name, pins in candidate_pins(Path(path)).items():
        setattr(importlib.import_module(module_name), "PINS", pins)  # noqa: B010
    return True


#: Done on import (``-p`` loads the plugin before any conftest), so before any SGLang import
#: makes the start-up hook apply a patch.
_REPINNED = _repin()


def pytest_configure(config: pytest.Config) -> None:
    if not _REPINNED:
        raise pytest.UsageError(f"{ENV_PINS} names no file: this plugin is for the candidate run")
