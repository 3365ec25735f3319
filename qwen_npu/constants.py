"""The words more than one room writes into states, verdicts and metrics, defined once.

Why a module of its own: the patch states (patches/registry.py), the GDN contract's verdicts,
the kernel readers, the driver check (hardware/) and the sidecar's readers all say ``unknown``
when they cannot tell, and the dashboards and alerts match that exact word. hardware/ sits below
patches/, so the word cannot live in the registry. Standard library only (the engine imports it).
"""

from __future__ import annotations

from typing import Final

#: What a reader says when it cannot tell (no state file, an unreadable source, no version).
UNKNOWN: Final = "unknown"
