"""The repository's paths, named once: tools, fixtures and tests import them from here.

Why this exists: the chart, the versions file and the docs sit at fixed places in a checkout, and
every harness that reads them used to find them by counting parent folders from its own file,
which breaks the day a file moves. The installed package (``qwen_npu``) never imports this: what it
needs from the checkout, its caller hands it.
"""

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
