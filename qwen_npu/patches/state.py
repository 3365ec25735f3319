"""The state file ``$QWEN_NPU_STATE_DIR/state.json``: what the patches did, and the UB plan.

Why this exists: every Python process of the engine (the launcher, each TP scheduler) applies the
patches on its own, and the sidecar, in another container, must see the result. Writers merge their
part into one JSON file under an exclusive lock and replace it atomically, so a reader never sees a
torn file and no process overwrites another's entry. ``read_state`` never raises: the sidecar
treats a missing or corrupt file as "unknown".

Schema (docs/architecture.md): ``schema_version``, ``updated_at``, ``qwen_npu_version``,
``sglang_version``, ``patches`` (name -> state, target, detail, pid, updated_at), ``ub_plan``
(``UbPlan.as_dict()`` keys plus ``cache_shape``, ``pid``, ``updated_at``; null until computed) and
``gdn_contract`` (link -> ``{"verdict": "pass"|"fail"|"unknown", "evidence": "..."}``, the links of
registry.GDN_CONTRACT; absent until a process has checked it: readers take absent links as
unknown).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
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
        try:
            return version("sglang")
        except PackageNotFoundError:
            return None
    except Exception:  # pragma: no cover - a broken metadata tree must not stop the engine
        return None


def _empty() -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "updated_at": None,
        "qwen_npu_version": __version__,
        "sglang_version": _sglang_version(),
        "patches": {},
        "ub_plan": None,
    }


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        return None
    if not isinstance(data.get("patches"), dict):
        return None
    return data


def read_state(state_dir: str | Path | None) -> dict[str, Any] | None:
    """The state file's content, or None when the folder or file is missing or unreadable."""
    if state_dir is None:
        return None
    return _load(Path(state_dir) / STATE_FILE)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    with open(directory / (STATE_FILE + ".lock"), "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _merge(state_dir: str | Path | None, update: Callable[[dict[str, Any]], None]) -> Path | None:
    """Read-modify-replace under the lock. Returns the file, or None (logged) when unwritable."""
    directory = Path(state_dir) if state_dir is not None else state_dir_from_env()
    if directory is None:
        return None
    path = directory / STATE_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with _locked(directory):
            data = _load(path) or _empty()
            update(data)
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
    """Record one patch's state (merged with the other patches' and processes' entries).

    ``effect`` (only for a patch that can tell, and only when given) says whether the applied
    patch changes anything: ``tiles`` / ``ignored`` / ``unknown`` for mamba-scatter-ub-aware.
    ``used_by_mode`` (when the process knows its engine mode: ``modes``) says whether that mode
    runs the code the patch fixes; a problem with an unused patch does not fail the start.
    """

    def update(data: dict[str, Any]) -> None:
        entry: dict[str, Any] = {
            "state": state,
            "target": target,
            "detail": detail,
            "pid": os.getpid(),
            "updated_at": time.time(),
        }
        if effect is not None:
            entry["effect"] = effect
        if used_by_mode is not None:
            entry["used_by_mode"] = used_by_mode
        data["patches"][name] = entry

    return _merge(state_dir, update)


def write_ub_plan(
    plan: Mapping[str, Any],
    *,
    cache_shape: Sequence[int],
    state_dir: str | Path | None = None,
) -> Path | None:
    """Record the UB plan the scatter uses (``plan`` is ``UbPlan.as_dict()``)."""

    def update(data: dict[str, Any]) -> None:
        entry = dict(plan)
        entry["cache_shape"] = [int(n) for n in cache_shape]
        entry["pid"] = os.getpid()
        entry["updated_at"] = time.time()
        data["ub_plan"] = entry

    return _merge(state_dir, update)


def write_gdn_contract(
    links: Mapping[str, Mapping[str, str]], *, state_dir: str | Path | None = None
) -> Path | None:
    """Record the GDN state contract's verdicts (``gdn_contract``: link -> verdict, evidence)."""

    def update(data: dict[str, Any]) -> None:
        data["gdn_contract"] = {
            name: {"verdict": str(link["verdict"]), "evidence": str(link["evidence"])}
            for name, link in links.items()
        }

    return _merge(state_dir, update)
