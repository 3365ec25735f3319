"""The state file ``$QWEN_NPU_STATE_DIR/state.json``: what the patches did, and the UB plan.

Why this exists: every Python process of the engine (the launcher, each TP scheduler) applies the
patches on its own, and the sidecar, in another container, must see the result. Writers merge their
part into one JSON file under an exclusive lock and replace it atomically, so a reader never sees a
torn file and no process overwrites another's entry. ``read_state`` never raises: the sidecar
treats a missing or corrupt file as "unknown". The schema: docs/architecture.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

from qwen_npu import __version__
from qwen_npu.log import PartLog

log = PartLog("patches")

SCHEMA_VERSION = 1
STATE_FILE = "state.json"
ENV_STATE_DIR = "QWEN_NPU_STATE_DIR"


def state_dir_from_env() -> Path | None:
    value = os.environ.get(ENV_STATE_DIR, "").strip()
    return Path(value) if value else None


def _sglang_version() -> str | None:
    try:
        return version("sglang")
    except Exception:  # not installed, or a broken metadata tree: never stop the engine
        return None


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        return None
    return data if isinstance(data.get("patches"), dict) else None


def read_state(state_dir: str | Path | None) -> dict[str, Any] | None:
    """The state file's content, or None when the folder or file is missing or unreadable."""
    return None if state_dir is None else _load(Path(state_dir) / STATE_FILE)


def _merge(
    state_dir: str | Path | None, key: str, value: Any, name: str | None = None
) -> Path | None:
    """Set ``data[key]`` (``data[key][name]``) under the lock, replacing the file atomically.
    Returns the file, or None (logged) when it cannot be written."""
    directory = Path(state_dir) if state_dir is not None else state_dir_from_env()
    if directory is None:
        return None
    path = directory / STATE_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / (STATE_FILE + ".lock"), "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file closes
            data = _load(path) or {
                "schema_version": SCHEMA_VERSION,
                "qwen_npu_version": __version__,
                "sglang_version": _sglang_version(),
                "patches": {},
                "ub_plan": None,
            }
            if name is None:
                data[key] = value
            else:
                data[key][name] = value
            data["updated_at"] = time.time()
            fd, tmp = tempfile.mkstemp(prefix=".state.", suffix=".tmp", dir=directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(data, handle, indent=2, sort_keys=True)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.chmod(tmp, 0o644)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
    except OSError as exc:
        log(
            "warning",
            "state.write_failed",
            file=str(path),
            error=str(exc),
            next=f"make {ENV_STATE_DIR} a writable folder (the engine keeps running without it)",
        )
        return None
    return path


def _stamped(entry: dict[str, Any]) -> dict[str, Any]:
    return entry | {"pid": os.getpid(), "updated_at": time.time()}


def write_patch_state(
    name: str,
    state: str,
    *,
    target: str,
    detail: str = "",
    effect: str | None = None,
    used_by_mode: bool | None = None,
    state_dir: str | Path | None = None,
) -> Path | None:
    """Record one patch's state, merged with the other patches' and processes' entries.
    ``effect`` (``tiles`` / ``ignored`` / ``unknown``, mamba-scatter-ub-aware's) and
    ``used_by_mode`` (``modes``) are written only when known."""
    entry: dict[str, Any] = {"state": state, "target": target, "detail": detail}
    entry |= {
        k: v for k, v in (("effect", effect), ("used_by_mode", used_by_mode)) if v is not None
    }
    return _merge(state_dir, "patches", _stamped(entry), name)


def write_ub_plan(
    plan: Mapping[str, Any], *, cache_shape: Sequence[int], state_dir: str | Path | None = None
) -> Path | None:
    """Record the UB plan the scatter uses (``plan`` is ``UbPlan.as_dict()``)."""
    entry = dict(plan) | {"cache_shape": [int(n) for n in cache_shape]}
    return _merge(state_dir, "ub_plan", _stamped(entry))


def write_gdn_contract(
    links: Mapping[str, Mapping[str, str]], *, state_dir: str | Path | None = None
) -> Path | None:
    """Record the GDN state contract's verdicts (``gdn_contract``: link -> verdict, evidence)."""
    value = {
        name: {"verdict": str(link["verdict"]), "evidence": str(link["evidence"])}
        for name, link in links.items()
    }
    return _merge(state_dir, "gdn_contract", value)
