"""The run-time fault switches behind ``GET/PATCH /sim/faults`` (contract: docs/architecture.md).

The same switches (except ``crash``, which exits 1 at once) are config keys, so a profile can begin
faulty.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field, fields
from typing import Any

from qwen_npu.sim.config import SimConfig

_BOOLS = ("hang_health", "hang_generate", "metrics_malformed", "garbled", "crash")


class FaultError(ValueError):
    """A bad PATCH body; the message names the key and the fix."""


@dataclass
class Faults:
    """Current fault switches; ``changed`` is set (and replaced) on every update."""

    error_rate: float = 0.0
    hang_health: bool = False
    hang_generate: bool = False
    metrics_delay_s: float = 0.0
    metrics_malformed: bool = False
    garbled: bool = False
    changed: asyncio.Event = field(
        default_factory=asyncio.Event, init=False, repr=False, compare=False
    )

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Faults:
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls) if f.init})

    def as_dict(self) -> dict[str, Any]:
        return {**{f.name: getattr(self, f.name) for f in fields(self) if f.init}, "crash": False}

    def parse_patch(self, body: Any) -> dict[str, Any]:
        """Validate a PATCH body into {key: value}; FaultError on an unknown key or bad value."""
        if not isinstance(body, dict):
            raise FaultError('body must be a JSON object such as {"hang_health": true}')
        known = set(self.as_dict())
        out: dict[str, Any] = {}
        for key, value in body.items():
            if key not in known:
                raise FaultError(f"unknown fault {key!r}; known: {', '.join(sorted(known))}")
            if key in _BOOLS:
                if not isinstance(value, bool):
                    raise FaultError(f"{key}: {value!r} must be true or false")
            else:
                ok = isinstance(value, int | float) and not isinstance(value, bool)
                if not ok or not math.isfinite(float(value)) or float(value) < 0:
                    raise FaultError(f"{key}: {value!r} must be a number >= 0")
                if key == "error_rate" and float(value) > 1:
                    raise FaultError(f"error_rate: {value!r} must lie in 0..1")
                value = float(value)
            out[key] = value
        return out

    def apply(self, changes: dict[str, Any]) -> None:
        for key, value in changes.items():
            if key != "crash":
                setattr(self, key, value)
        old, self.changed = self.changed, asyncio.Event()
        old.set()
