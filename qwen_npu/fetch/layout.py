"""What a fetch leaves on disk, and the checks a reader runs before trusting it.

The staging Job writes and the engine pods read on a shared claim, so a reader must never take a
half-written checkpoint for a complete one::

    DEST -> .NAME.fetch/revs/REV            a relative link, swapped when REV is complete
    .NAME.fetch/lock, progress.json         the writer's lease (lease.py), its bytes/rate/ETA
    .NAME.fetch/revs/REV/.qwen-npu/         partial/ (resumed), verified.jsonl (never fetched
                                            again), manifest.json, complete (written last)

Standard library only: the engine image's init container (``qwen-npu fetch wait``) reads it.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
META = ".qwen-npu"
MANIFEST = "manifest.json"
COMPLETE = "complete"


def _slug(revision: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", revision)[:96]


def sha256_file(path: Path) -> str:
    with path.open("rb", buffering=0) as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_object(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None when it is missing, torn or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


@dataclass(frozen=True)
class Store:
    """The paths of one DEST."""

    dest: Path

    @property
    def home(self) -> Path:
        return self.dest.parent / f".{self.dest.name}.fetch"

    @property
    def lock(self) -> Path:
        return self.home / "lock"

    @property
    def progress(self) -> Path:
        return self.home / "progress.json"

    def rev_dir(self, revision: str) -> Path:
        return self.home / "revs" / _slug(revision)

    def current(self) -> Path | None:
        """The revision directory DEST points to, or None."""
        if not self.dest.is_symlink():
            return None
        target = self.dest.parent / os.readlink(self.dest)
        return target if target.is_dir() else None

    def foreign(self) -> bool:
        """DEST exists and is not a link this fetch made (refuse to write into it)."""
        return (self.dest.exists() and not self.dest.is_symlink()) or (
            self.dest.is_symlink() and not os.readlink(self.dest).startswith(self.home.name + "/")
        )

    def point_to(self, rev_dir: Path) -> None:
        """Swap DEST to ``rev_dir`` atomically (a new link renamed over the old one)."""
        rel = os.path.relpath(rev_dir, self.dest.parent)
        tmp = self.dest.with_name(f".{self.dest.name}.link.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        os.symlink(rel, tmp)
        os.replace(tmp, self.dest)

    def prune(self, keep: list[Path]) -> list[Path]:
        """Delete revision directories other than ``keep``; returns what was deleted."""
        gone = []
        revs = self.home / "revs"
        for d in sorted(revs.iterdir()) if revs.is_dir() else []:
            if all(d.resolve() != k.resolve() for k in keep):
                shutil.rmtree(d, ignore_errors=True)
                gone.append(d)
        return gone

    def write_progress(self, data: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            _write_atomic(self.progress, json.dumps(data, sort_keys=True).encode())

    def read_progress(self) -> dict[str, Any] | None:
        return read_object(self.progress)


class Revision:
    """One revision directory: its journal, manifest and marker."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.meta = root / META

    @property
    def partial(self) -> Path:
        return self.meta / "partial"

    @property
    def journal(self) -> Path:
        return self.meta / "verified.jsonl"

    def verified(self) -> dict[str, dict[str, Any]]:
        """Files verified so far (path -> entry), checked against the disk's sizes."""
        out: dict[str, dict[str, Any]] = {}
        try:
            lines = self.journal.read_text().splitlines()
        except OSError:
            return out
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a torn last line (the fetch died mid-write): that file is re-checked
            path = self.root / str(entry.get("path"))
            if path.is_file() and path.stat().st_size == entry.get("size"):
                out[str(entry["path"])] = entry
        return out

    def record(self, entry: dict[str, Any]) -> None:
        self.meta.mkdir(parents=True, exist_ok=True)
        with self.journal.open("a") as out:
            out.write(json.dumps(entry, sort_keys=True) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def complete(self, manifest: dict[str, Any]) -> None:
        """Write the manifest, then the marker naming the manifest's sha256 (the last write)."""
        data = json.dumps(manifest, indent=1, sort_keys=True).encode()
        self.meta.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.meta / MANIFEST, data)
        marker = {
            "schema_version": SCHEMA_VERSION,
            "source": manifest["source"],
            "requested_revision": manifest["requested_revision"],
            "revision": manifest["revision"],
            "manifest_sha256": hashlib.sha256(data).hexdigest(),
            "completed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        shutil.rmtree(self.partial, ignore_errors=True)
        _write_atomic(self.meta / COMPLETE, json.dumps(marker, sort_keys=True).encode())

    def marker(self) -> dict[str, Any] | None:
        return read_object(self.meta / COMPLETE)

    def manifest(self) -> dict[str, Any] | None:
        """The manifest, only when the marker vouches for it (its sha256 matches)."""
        marker = self.marker()
        try:
            data = (self.meta / MANIFEST).read_bytes()
        except OSError:
            return None
        if marker is None or hashlib.sha256(data).hexdigest() != marker.get("manifest_sha256"):
            return None
        manifest = json.loads(data)
        return manifest if isinstance(manifest, dict) else None

    def problems(self, sums: bool) -> dict[str, str]:
        """What is wrong with a complete revision (file -> why); {} when it is sound."""
        manifest = self.manifest()
        if manifest is None:
            return {
                str(self.meta / COMPLETE): "no completion marker, or the manifest differs from it"
            }
        problems = {}
        to_hash = []
        for entry in manifest.get("files", []):
            name = str(entry["path"])
            path = self.root / name
            if not path.is_file():
                problems[name] = "missing"
            elif path.stat().st_size != entry["size"]:
                problems[name] = f"{path.stat().st_size} bytes, the manifest says {entry['size']}"
            elif sums:
                to_hash.append((name, path, str(entry["sha256"])))
        # hashlib releases the GIL on large blocks: one thread per core hashes the shards at once.
        workers = max(1, min(len(to_hash), os.cpu_count() or 1, 16))
        with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verify") as pool:
            sums_of = pool.map(lambda item: sha256_file(item[1]), to_hash)
            for (name, _, expected), got in zip(to_hash, sums_of, strict=True):
                if got != expected:
                    problems[name] = "sha256 differs from the manifest"
        return problems

    def check(self, sums: bool) -> list[str]:
        """``problems`` as lines."""
        return [f"{name}: {why}" for name, why in self.problems(sums).items()]
