"""The word every room writes when it cannot tell (no state file, an unreadable source, no
version), which the dashboards and alerts match; below hardware/ and patches/. Stdlib only."""

from __future__ import annotations

from typing import Final

UNKNOWN: Final = "unknown"
