"""A pytest plugin (``-p tools.candidate.pins_plugin``): the patches' ``PINS`` are the candidate's.

Why: the candidate run judges each patch by its own tests; with the pinned fingerprints the drift
guard would refuse every changed target and each test would fail for that alone. Set on import from
``QWEN_NPU_CANDIDATE_PINS``'s file, before any conftest imports SGLang (and the hook patches it).
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
