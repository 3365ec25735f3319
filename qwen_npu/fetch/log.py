"""The fetch's log lines: ``qwen_npu.fetch level=<level> event=<event> key=value ... next="..."``.

Why this exists: a staging Job's or init container's log is read by an on-call engineer who greps
one prefix; every line says what happened and, when something is wrong, what to do next. The shape
is the patches' (``qwen_npu.patches.log.format_fields``); standard library only.
"""

from __future__ import annotations

import sys

from qwen_npu.patches.log import format_fields

PREFIX = "qwen_npu.fetch"


def log(level: str, event: str, **fields: object) -> None:
    """Print one line to stderr (flushed: a Job's log is read while it runs)."""
    print(f"{PREFIX} level={level} {format_fields(event, fields)}", file=sys.stderr, flush=True)
