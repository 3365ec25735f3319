"""The checkout's paths, named once for tools, fixtures and tests (counting parent folders from
each file broke the day one moved). The installed package never imports this."""

from __future__ import annotations

from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parent.parent
CHART_DIR: Final = REPO / "helm" / "qwen-npu"
CHART_VALUES: Final = CHART_DIR / "values.yaml"
VERSIONS_FILE: Final = REPO / "docker" / "versions.env"
DOCS: Final = REPO / "docs"
STUBS: Final = REPO / "tests" / "stubs"
SIM_PROFILES: Final = REPO / "qwen_npu" / "sim" / "profiles"
OUT: Final = REPO / "out"
