"""The patches' log lines: ``qwen_npu.patches level=... event=... key=value ... next="..."``.

Why this exists: the patches run inside SGLang's processes before or after SGLang configures
logging, and an on-call engineer greps the engine log for one prefix. The shape and the handler
are the shared ones (qwen_npu/log.py); this module names the part and reads
``QWEN_NPU_PATCH_LOG_LEVEL`` (default INFO) for the threshold. ``log``, ``get_logger`` and
``format_fields`` are the names the patch modules import.
"""

from __future__ import annotations

import logging
import os

from qwen_npu import log as _shared
from qwen_npu.log import format_fields

PART = "patches"
LOGGER_NAME = f"{_shared.PREFIX}.{PART}"
ENV_LEVEL = "QWEN_NPU_PATCH_LOG_LEVEL"
_logger: logging.Logger | None = None


def get_logger() -> logging.Logger:
    """The patches' logger, its threshold from ``QWEN_NPU_PATCH_LOG_LEVEL`` (read once)."""
    global _logger
    if _logger is None:
        level = os.environ.get(ENV_LEVEL, "INFO").upper()
        _logger = _shared.get_logger(PART, level if level in _shared.LEVELS else "INFO")
    return _logger


def log(level: str, event: str, **fields: object) -> None:
    """Emit ``event=<event> k=v ...`` at ``level`` (debug, info, warning, error)."""
    get_logger()
    _shared.log(PART, level, event, **fields)


__all__ = ["LOGGER_NAME", "format_fields", "get_logger", "log"]
