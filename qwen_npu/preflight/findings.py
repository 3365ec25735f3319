"""One finding of the preflight: a stable code, a severity and a message that says what to do.

Every check returns findings instead of printing or raising, so the human table, the ``--json``
output and the exit code all come from the same list.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    keys: tuple[str, ...] = ()
    key_count: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "keys": list(self.keys),
            "key_count": self.key_count,
        }


def finding(code: str, severity: str, message: str, keys: list[str] | None = None) -> Finding:
    """Build a finding; long key lists are cut to MAX_KEYS, ``key_count`` keeps the total."""
    listed = list(keys or [])
    return Finding(code, severity, message, tuple(listed[:MAX_KEYS]), len(listed))
