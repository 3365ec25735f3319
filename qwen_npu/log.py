"""The one log line shape of every part of qwen-npu, so on-call greps one shape in every log:

    qwen_npu.<part> level=<LEVEL> event=<event> key=value ... next="<what to do next>"

logfmt, ``None`` fields left out. ``log = PartLog("sidecar")`` binds a part; its logger has its
own stderr handler and does not propagate (the lines appear whatever the host process, e.g.
SGLang, does with the root logger). ``LINE`` is the shape as a regex. Standard library only.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping

PREFIX = "qwen_npu"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: Parts whose threshold an environment variable sets (read at the part's first line).
LEVEL_ENV = {"patches": "QWEN_NPU_PATCH_LOG_LEVEL"}
LINE = re.compile(
    rf"{PREFIX}\.[a-z][a-z0-9_.]* level=(?:{'|'.join(LEVELS)}) event=[A-Za-z0-9_.-]+"
    r'(?: [A-Za-z_][A-Za-z0-9_.]*=(?:"(?:[^"\\\n]|\\.)*"|[^ "=\n\t]+))*'
)
_CONFIGURED: set[str] = set()


def quote(value: object) -> str:
    """A logfmt value: as is, or double-quoted with backslash escapes."""
    text = str(value)
    if text == "" or any(c in text for c in ' "=\n\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def format_fields(event: str, fields: Mapping[str, object]) -> str:
    parts = [f"event={event}"]
    parts += [f"{key}={quote(value)}" for key, value in fields.items() if value is not None]
    return " ".join(parts)


def level_number(level: str) -> int:
    """``"info"``, ``"WARNING"`` ... as logging's number (unknown names: INFO)."""
    return logging.getLevelNamesMapping().get(level.strip().upper(), logging.INFO)


def line(part: str, level: str, event: str, **fields: object) -> str:
    """The line ``log`` writes, as a string (for a part that prints before logging is set up)."""
    name = logging.getLevelName(level_number(level))
    return f"{PREFIX}.{part} level={name} {format_fields(event, fields)}"


class Formatter(logging.Formatter):
    """The shape for any record; a library's own (uvicorn's) becomes ``event=message msg=...``,
    written as the ``part`` it serves when one is given."""

    def __init__(self, part: str | None = None) -> None:
        super().__init__()
        self.part = part

    def format(self, record: logging.LogRecord) -> str:
        name = record.name
        event = getattr(record, "qwen_npu_event", None)
        fields: Mapping[str, object] = getattr(record, "qwen_npu_fields", {})
        if event is None:
            event, fields = "message", {"msg": record.getMessage()}
            if self.part is not None and not name.startswith(f"{PREFIX}."):
                name, fields = f"{PREFIX}.{self.part}", {"logger": record.name, **fields}
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            fields = {**fields, "error": f"{type(exc).__name__}: {exc}"}
        return f"{name} level={record.levelname} {format_fields(event, fields)}"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at emit time (test capture, redirected streams)."""

    def __init__(self, part: str | None = None) -> None:
        super().__init__()
        self.setFormatter(Formatter(part))

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr  # under the handler's lock
        super().emit(record)


def get_logger(part: str, level: str | None = None) -> logging.Logger:
    """The logger ``qwen_npu.<part>`` with its stderr handler; ``level`` sets its threshold (INFO
    at first)."""
    logger = logging.getLogger(f"{PREFIX}.{part}")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())
        logger.propagate = False
        if level is None and logger.level == logging.NOTSET:
            level = "INFO"
    if level is not None:
        logger.setLevel(level_number(level))
    return logger


def setup(part: str, level: str, also: Iterable[str] = ()) -> logging.Logger:
    """A process's logging: the part's logger at ``level``, and the loggers named in ``also`` (a
    server library's) in the same shape."""
    logger = get_logger(part, level)
    for name in also:
        other = logging.getLogger(name)
        other.handlers[:] = [_StderrHandler(part)]
        other.setLevel(level_number(level))
        other.propagate = False
    return logger


def log(part: str, level: str, event: str, **fields: object) -> None:
    get_logger(part).log(
        level_number(level), event, extra={"qwen_npu_event": event, "qwen_npu_fields": fields}
    )


class PartLog:
    """``log(level, event, **fields)`` of one part; ``next=`` is written last."""

    def __init__(self, part: str) -> None:
        self.part = part

    def logger(self) -> logging.Logger:
        """The part's logger; its first use sets its threshold (``LEVEL_ENV``'s variable, else
        INFO), after which a caller that quiets the part quiets every module of it."""
        if self.part not in _CONFIGURED:
            _CONFIGURED.add(self.part)
            env = LEVEL_ENV.get(self.part)
            wanted = os.environ.get(env, "INFO").upper() if env else None
            return get_logger(self.part, wanted if wanted in LEVELS else None)
        return get_logger(self.part)

    def setup(self, level: str, also: Iterable[str] = ()) -> logging.Logger:
        _CONFIGURED.add(self.part)
        return setup(self.part, level, also)

    def __call__(self, level: str, event: str, **fields: object) -> None:
        self.logger()
        nxt = fields.pop("next", None)
        log(self.part, level, event, **fields, next=nxt)


class RateLimiter:
    """One log line per key per ``every_s`` seconds."""

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
