"""The info step: the patches' state file and the engine's ``/server_info``, on a slower cadence.

The reader keeps what it last read, as read; the accessors interpret it when asked. The UB plan
the scatter patch used is compared with the one config.json predicts by the same rule
(``hardware.ub_plan.plan``), so a disagreement is a metric and an alert, not a surprise.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_npu.checkpoint.model_config import ModelConfigError, read_model_config
from qwen_npu.constants import UNKNOWN
from qwen_npu.hardware.ub_plan import UbPlanError, plan
from qwen_npu.log import PartLog, RateLimiter
from qwen_npu.metrics.catalogue import GDN_LINKS, GDN_VERDICTS, PATCH_NAMES, PATCH_STATES
from qwen_npu.patches.state import STATE_FILE, read_state
from qwen_npu.sidecar.engine_client import EngineError
from qwen_npu.sidecar.health import EngineStep

log = PartLog("sidecar")

_SPEC_OFF = (None, "", "none", "NONE")
_NUMBERS = ("ub_bytes", "h_block_size", "tile_bytes", "buffered_bytes", "headroom_bytes")
NAN = math.nan


@dataclass(frozen=True)
class UbStats:
    """One UB plan's numbers as the ``qwen_npu_ub_*`` gauges show them (NaN: unknown)."""

    known: bool = False
    ub_bytes: float = NAN
    h_block_size: float = NAN
    tile_bytes: float = NAN
    buffered_bytes: float = NAN
    headroom_bytes: float = NAN
    plane_overflow: float = NAN


@dataclass(frozen=True)
class Predicted:
    """The predicted plan (``None`` when it cannot be made) and why not, for /status."""

    plan: dict[str, Any] | None
    error: str | None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def stats_from_plan(data: Mapping[str, Any] | None) -> UbStats:
    """UbStats from a ``UbPlan.as_dict()``-shaped mapping; unknown when anything is off."""
    if not isinstance(data, Mapping):
        return UbStats()
    values: dict[str, float] = {}
    for key in _NUMBERS:
        number = _number(data.get(key))
        if number is None and key == "headroom_bytes":
            number = values["ub_bytes"] - values["buffered_bytes"]
        if number is None:
            return UbStats()
        values[key] = number
    overflow = data.get("plane_overflow")
    if not isinstance(overflow, bool):
        return UbStats()
    return UbStats(known=True, plane_overflow=float(overflow), **values)


def predict(model_dir: Path | None, tp_size: int, mamba_ssm_dtype: str | None) -> Predicted:
    """The plan config.json predicts for one TP rank, or the one-line reason it cannot."""
    if model_dir is None:
        return Predicted(None, "QWEN_NPU_MODEL_DIR is not set")
    try:
        config = read_model_config(model_dir, mamba_ssm_dtype=mamba_ssm_dtype, environ={})
    except ModelConfigError as exc:
        return Predicted(None, str(exc))
    heads, v_dim, k_dim = (
        config.linear_num_value_heads,
        config.linear_value_head_dim,
        config.linear_key_head_dim,
    )
    if heads is None or v_dim is None or k_dim is None:
        return Predicted(
            None, f"{config.path}: no GDN (linear attention) fields; no scatter to plan"
        )
    if heads % tp_size:
        return Predicted(
            None,
            f"{config.path}: linear_num_value_heads {heads} is not divisible by "
            f"QWEN_NPU_TP_SIZE {tp_size}; set the engine's TP size",
        )
    try:
        result = plan(v_dim, k_dim, config.mamba_ssm_dtype, num_heads=heads // tp_size)
    except UbPlanError as exc:
        return Predicted(None, f"{config.path}: {exc}")
    return Predicted(result.as_dict(), None)


def mismatch(engine: UbStats, predicted: UbStats) -> bool:
    """Both known, and the block size or the tile differs."""
    if not (engine.known and predicted.known):
        return False
    return (
        engine.h_block_size != predicted.h_block_size or engine.tile_bytes != predicted.tile_bytes
    )


def finite(value: float) -> float | None:
    """``value``, or None for NaN and infinities (JSON has neither)."""
    return value if math.isfinite(value) else None


def _as_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def _states(
    entries: Any, names: tuple[str, ...], key: str, known: tuple[str, ...]
) -> dict[str, str]:
    out = dict.fromkeys(names, UNKNOWN)
    if isinstance(entries, dict):
        for name, entry in entries.items():
            value = entry.get(key) if isinstance(entry, dict) else None
            out[str(name)] = value if value in known else UNKNOWN
    return out


@dataclass(eq=False)
class InfoReader(EngineStep):
    state: dict[str, Any] | None = None  # the last state file read (None: unreadable)
    info: dict[str, Any] | None = None  # the last good /server_info answer
    _log_limiter: RateLimiter = field(default_factory=lambda: RateLimiter(60.0))

    async def __call__(self) -> None:
        await self.read_state_file()
        if self.health.last_outcome in (None, "refused"):
            return
        await self.read_server_info()

    async def read_state_file(self) -> None:
        directory = self.settings.state_dir
        state = await asyncio.to_thread(read_state, directory) if directory else None
        if state is None and self.state is not None and self._log_limiter.allow("state"):
            log(
                "warning",
                "state_file_unreadable",
                file=str(directory and directory / STATE_FILE),
                next="patch states, GDN verdicts and the engine UB plan are reported as unknown",
            )
        self.state = state

    async def read_server_info(self) -> None:
        path = "/server_info"
        try:
            response = await self.engine().request(
                "GET", path, timeout=self.settings.request_timeout_s
            )
            self.info = response.json_object()
        except EngineError as exc:
            self.errors.count(exc, path)

    def patch_states(self) -> dict[str, str]:
        patches = self.state.get("patches") if self.state else None
        return _states(patches, PATCH_NAMES, "state", PATCH_STATES)

    def patch_used(self) -> dict[str, float]:
        """Per patch: 1.0 when the engine's mode uses it, 0.0 when not, NaN when not recorded."""
        patches = self.state.get("patches") if self.state else None
        used = {}
        for name in PATCH_NAMES:
            entry = patches.get(name) if isinstance(patches, dict) else None
            value = entry.get("used_by_mode") if isinstance(entry, dict) else None
            used[name] = float(value) if isinstance(value, bool) else math.nan
        return used

    def gdn_verdicts(self) -> dict[str, str]:
        links = self.state.get("gdn_contract") if self.state else None
        return _states(links, GDN_LINKS, "verdict", GDN_VERDICTS)

    def ub_engine(self) -> UbStats:
        return stats_from_plan(self.state.get("ub_plan") if self.state else None)

    def ub_mismatch(self, predicted: UbStats) -> bool:
        return mismatch(self.ub_engine(), predicted)

    def sglang_version(self) -> str:
        """From the state file (what the engine imported), else ``/server_info``, else unknown."""
        version = self.state.get("sglang_version") if self.state else None
        if isinstance(version, str) and version:
            return version
        version = (self.info or {}).get("version")
        if isinstance(version, str) and version:
            return version[:64]
        return UNKNOWN

    def spec_enabled(self) -> bool:
        return self.info is not None and self.info.get("speculative_algorithm") not in _SPEC_OFF

    def spec_algorithm(self) -> str:
        """The algorithm; none when off, unknown before /server_info answered."""
        if self.info is None:
            return UNKNOWN
        return str(self.info["speculative_algorithm"]) if self.spec_enabled() else "none"

    def spec_number(self, key: str) -> float:
        """``speculative_num_steps`` or ``_num_draft_tokens``: 0 when off, NaN when unknown."""
        if self.info is None:
            return math.nan
        return _as_float(self.info.get(key)) if self.spec_enabled() else 0.0

    def server_info_view(self) -> dict[str, Any]:
        if self.info is None:
            return {}
        version = self.info.get("version")
        states = self.info.get("internal_states")
        lifetime = None
        if isinstance(states, list) and states and isinstance(states[0], dict):
            lifetime = states[0].get("avg_spec_accept_length")
        return {
            "speculative_algorithm": self.spec_algorithm(),
            "speculative_num_steps": finite(self.spec_number("speculative_num_steps")),
            "speculative_num_draft_tokens": finite(
                self.spec_number("speculative_num_draft_tokens")
            ),
            "version": version if isinstance(version, str) else None,
            "avg_spec_accept_length_lifetime": (
                lifetime if isinstance(lifetime, int | float) else None
            ),
        }
