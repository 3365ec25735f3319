"""The load test's status lines and its "target not ready" error, apart from the locust runner.

Why apart: importing qwen_npu.loadtest.runner imports locust, whose gevent monkey-patching changes
sockets and threads for the whole process. The verbs (bench, bench-compare, mtp-tune) report bad
input and progress before any load runs, and other code (tests, tools) prints in the same shape,
without paying for or being changed by that import.
"""

from __future__ import annotations

from qwen_npu import log as shared_log


class TargetNotReady(RuntimeError):
    """The target did not answer in time, or the warm-up request failed."""


def say(event: str, level: str = "info", **fields: object) -> None:
    """Progress and status lines on stderr in the shared shape (qwen_npu/log.py):
    ``qwen_npu.bench level=INFO event=<event> k=v ...`` (the table goes to stdout)."""
    shared_log.log("bench", level, event, **fields)
