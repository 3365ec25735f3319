"""Helpers to run ``qwen-npu bench`` as a subprocess (locust monkey-patches whoever imports it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tools.paths import REPO


def bench(
    target: str, out: Path, *args: str, timeout: float = 120
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run the bench, return the process and the JSONL records it appended."""
    cmd = [sys.executable, "-m", "qwen_npu", "bench", "--target", target, "--output", str(out)]
    proc = subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return proc, records
