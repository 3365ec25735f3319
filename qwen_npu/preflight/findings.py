"""One finding of the preflight: a stable code (docs/preflight.md), a severity and what to do.

Checks return findings instead of printing or raising, so the table, ``--json`` and the exit code
come from one list.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

BLOCKING = "blocking"  # the engine would fail to start or to serve: exit 1
WARNING = "warning"  # it would start, but something deserves a look
INFO = "info"

#: At most this many keys are listed in one finding (the count is always given).
MAX_KEYS = 20


@dataclass(frozen=True)
class Finding:
    """A result of one check; ``code`` is stable (documented in docs/preflight.md)."""

    code: str
    severity: str
    message: str
    key_count: int = 0  # every key, though at most MAX_KEYS are listed
    keys: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "keys": list(self.keys)}


def finding(code: str, severity: str, message: str, keys: list[str] | None = None) -> Finding:
    """Long key lists are cut to MAX_KEYS; ``key_count`` keeps the total."""
    listed = list(keys or [])
    return Finding(code, severity, message, len(listed), tuple(listed[:MAX_KEYS]))


def add(
    findings: list[Finding], code: str, severity: str, message: str, keys: list[str] | None = None
) -> None:
    findings.append(finding(code, severity, message, keys))
