"""Structured log lines for the sidecar: one JSON object per line on stderr.

Why this exists: on-call reads the sidecar's log with ``kubectl logs -c sidecar | jq``; every line
has ``ts``, ``level``, ``event`` and, where something needs doing, ``action`` (what to do next).
Only transitions are logged (engine became ready, started failing, restarted, canary degenerated),
and repeated engine errors at most once a minute per kind, so a hanging engine does not flood it.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LOGGER_NAME = "qwen_npu.sidecar"


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields.update(getattr(record, "fields", {}))
        return json.dumps(fields, default=str, ensure_ascii=False)


def setup(level: str = "info") -> None:
    """Send the sidecar's (and uvicorn's error) logs to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter())
    for name in (LOGGER_NAME, "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False


def log(level: str, event: str, **fields: Any) -> None:
    logging.getLogger(LOGGER_NAME).log(
        logging.getLevelNamesMapping()[level.upper()],
        event,
        extra={"fields": {k: v for k, v in fields.items() if v is not None}},
    )


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
