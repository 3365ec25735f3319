"""The sidecar's log lines: ``qwen_npu.sidecar level=... event=... key=value ... next="..."``.

Why this exists: on-call reads the sidecar's log with ``kubectl logs -c sidecar``, in the shape
every part of qwen-npu writes (qwen_npu/log.py): the event, its fields and, where something needs
doing, ``next=`` (what to do next). Only transitions are logged (engine became ready, started
failing, restarted, canary degenerated), and repeated engine errors at most once a minute per kind
(``RateLimiter``), so a hanging engine does not flood it. uvicorn's own lines come out in the same
shape (``event=message msg="..."``).

The interface the sidecar's modules call: ``setup(level)``, ``log(level, event, **fields)``,
``RateLimiter``. ``action=`` (the key the sidecar used before the shared shape) is written as
``next=``.
"""

from __future__ import annotations

import time
from typing import Any

from qwen_npu import log as _shared

PART = "sidecar"
LOGGER_NAME = f"{_shared.PREFIX}.{PART}"


def setup(level: str = "info") -> None:
    """Send the sidecar's (and uvicorn's error) logs to stderr in the shared shape."""
    _shared.setup(PART, level, also=("uvicorn", "uvicorn.error"))


def log(level: str, event: str, **fields: Any) -> None:
    """One line at ``level``; ``next=`` (or the older ``action=``) last."""
    nxt = fields.pop("next", None) or fields.pop("action", None)
    fields.pop("action", None)
    _shared.log(PART, level, event, **fields, next=nxt)


class RateLimiter:
    """Allows one log line per key per ``every_s`` seconds."""

    def __init__(self, every_s: float = 60.0) -> None:
        self.every_s = every_s
        self._last: dict[str, float] = {}

    def allow(self, key: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        last = self._last.get(key)
        if last is not None and now - last < self.every_s:
            return False
        self._last[key] = now
        return True
