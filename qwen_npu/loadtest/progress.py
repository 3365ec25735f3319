"""The load test's status lines and "target not ready" error, apart from the runner: importing
that imports locust, whose gevent monkey-patching changes the whole process."""

from __future__ import annotations

from qwen_npu import log as shared_log


class TargetNotReady(RuntimeError):
    """The target did not answer in time, or the warm-up request failed."""


def say(event: str, level: str = "info", **fields: object) -> None:
    """A status line on stderr in the shared shape (qwen_npu/log.py); the table goes to stdout."""
    shared_log.log("bench", level, event, **fields)
