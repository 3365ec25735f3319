"""A pytest plugin (``-p tools.candidate.pins_plugin``): the patches' ``PINS`` are the candidate's.

Why: ``make sglang-candidate`` judges each patch by its own tests against the candidate (re-pin
when they pass, port when they fail). With the pinned fingerprints the drift guard would refuse
every changed target and each test would fail for that alone. The pins come from the JSON file
``QWEN_NPU_CANDIDATE_PINS`` names (``run`` writes it), set on import: ``-p`` loads the plugin
before any conftest imports SGLang and the start-up hook applies a patch.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest

from qwen_npu.patches import core
from tools.candidate import ENV_PINS

_PINS_FILE = os.environ.get(ENV_PINS)
for _module, _pins in json.loads(Path(_PINS_FILE).read_text() if _PINS_FILE else "{}").items():
    _new = (
        core.Pin(p["module"], p["qualname"], tuple(p["params"]), p["fingerprint"]) for p in _pins
    )
    setattr(importlib.import_module(_module), "PINS", tuple(_new))  # noqa: B010


def pytest_configure(config: pytest.Config) -> None:
    if not _PINS_FILE:
        raise pytest.UsageError(f"{ENV_PINS} names no file: this plugin is for the candidate run")
