"""``qwen-npu preflight``: tell in a second, before a long model load, whether a checkpoint starts.

Standard library only: it runs in the engine image's init container, on the engine's rendered
command line. ``run_preflight`` is the report, ``cli.main`` the verb.
"""

from __future__ import annotations

from qwen_npu.preflight.rules import Options, Report, run_preflight

__all__ = ["Options", "Report", "run_preflight"]
