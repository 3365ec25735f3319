"""The tail every perf harness shares: its report to out/perf/<part>.md and the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def write_report(out: Path, lines: Sequence[str]) -> int:
    text = "\n".join(lines)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return 0
