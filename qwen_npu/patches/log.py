"""Structured log lines for the patches: ``qwen_npu.patches level=... event=... key=value``.

Why this exists: the patches run inside SGLang's processes before or after SGLang configures
logging, and an on-call engineer greps the engine log for one prefix. The logger has its own
stderr handler (so lines appear whatever SGLang does with the root logger) and does not propagate.
``QWEN_NPU_PATCH_LOG_LEVEL`` (default INFO) sets the threshold.
"""

from __future__ import annotations

import logging
import os
import sys

LOGGER_NAME = "qwen_npu.patches"
_logger: logging.Logger | None = None


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at emit time (test capture, redirected streams)."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def _quote(value: object) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' "=\n\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def format_fields(event: str, fields: dict[str, object]) -> str:
    parts = [f"event={event}"]
    parts += [f"{key}={_quote(value)}" for key, value in fields.items() if value is not None]
    return " ".join(parts)


def get_logger() -> logging.Logger:
    global _logger
    if _logger is None:
        logger = logging.getLogger(LOGGER_NAME)
        if not logger.handlers:
            handler = _StderrHandler()
            handler.setFormatter(logging.Formatter("%(name)s level=%(levelname)s %(message)s"))
            logger.addHandler(handler)
        logger.propagate = False
        level = os.environ.get("QWEN_NPU_PATCH_LOG_LEVEL", "INFO").upper()
        logger.setLevel(level if level in logging.getLevelNamesMapping() else "INFO")
        _logger = logger
    return _logger


def log(level: str, event: str, **fields: object) -> None:
    """Emit ``event=<event> k=v ...`` at ``level`` (debug, info, warning, error)."""
    get_logger().log(logging.getLevelName(level.upper()), format_fields(event, fields))
