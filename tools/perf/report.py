"""The tail every perf harness shares: its report written to out/perf/<part>.md and shown.

Why this exists: each `make perf-<part>` ends the same way (the Markdown table to the file the
docs quote, and the same text on the terminal); one function keeps them alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def write_report(out: Path, lines: Sequence[str]) -> int:
    """Write ``lines`` to ``out`` (its folder made), print them, return 0 (the exit status)."""
    text = "\n".join(lines)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return 0
