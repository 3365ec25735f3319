"""One file from a source to DEST: bounded memory, a timeout per read, retries with backoff, resume,
verification against what the source publishes.

A file streams in 1 MiB chunks into ``partial/``; a cut resumes from the bytes on disk (re-hashed,
not re-downloaded); a mismatch is deleted and fetched again; only a verified file is moved into
place and journalled.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from qwen_npu.cli_parser import EXIT_NO_SPACE
from qwen_npu.fetch.layout import Revision, Store
from qwen_npu.fetch.source import (
    GIT_SHA1,
    MD5,
    MULTIPART,
    SHA256,
    FetchError,
    Listing,
    Remote,
    RemoteFile,
    TransientError,
)
from qwen_npu.log import PartLog

log = PartLog("fetch")

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
HASH_BLOCK = 8 << 20


@dataclass(frozen=True)
class Retry:
    """How often and how patiently a file is tried."""

    attempts: int = 6
    backoff_seconds: float = 2.0
    max_backoff_seconds: float = 120.0

    def pause(self, attempt: int) -> float:
        base = min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (attempt - 1))
        return float(base * (0.5 + random.random() / 2))

    def wait(
        self, attempt: int, error: object, then: str, event: str = "retry", **where: Any
    ) -> None:
        """Log the retry, then pause before the next attempt."""
        pause = self.pause(attempt)
        log(
            "warning",
            event,
            **where,
            attempt=attempt,
            of=self.attempts,
            error=error,
            pause_s=round(pause, 2),
            next=then,
        )
        time.sleep(pause)


class Hasher:
    """sha256 of every file, plus what the source publishes (md5, git blob sha1, multipart)."""

    def __init__(self, f: RemoteFile) -> None:
        self.f = f
        self.sha256 = hashlib.sha256()
        self.extra: Any = None  # what the source publishes besides sha256
        if f.check == MD5:
            self.extra = hashlib.md5(usedforsecurity=False)
        elif f.check == GIT_SHA1:
            self.extra = hashlib.sha1(b"blob %d\0" % f.size, usedforsecurity=False)
        self.parts: list[bytes] = []
        self.part = hashlib.md5(usedforsecurity=False)
        self.part_left = f.part_size

    def update(self, data: bytes) -> None:
        self.sha256.update(data)
        if self.extra is not None:
            self.extra.update(data)
        if self.f.check == MULTIPART:
            view = memoryview(data)
            while view:
                take = view[: self.part_left]
                self.part.update(take)
                self.part_left -= len(take)
                view = view[len(take) :]
                if self.part_left == 0:
                    self.parts.append(self.part.digest())
                    self.part = hashlib.md5(usedforsecurity=False)
                    self.part_left = self.f.part_size

    def feed_file(self, path: Path, size: int) -> None:
        with path.open("rb", buffering=0) as src:
            while size > 0 and (block := src.read(min(HASH_BLOCK, size))):
                self.update(block)
                size -= len(block)

    def matches(self) -> bool:
        f = self.f
        if f.check == SHA256:
            return self.sha256.hexdigest() == f.expected
        if self.extra is not None:
            return bool(self.extra.hexdigest() == f.expected)
        if f.check == MULTIPART:
            parts = list(self.parts)
            if self.part_left != f.part_size:
                parts.append(self.part.digest())
            whole = hashlib.md5(b"".join(parts), usedforsecurity=False).hexdigest()
            return f"{whole}-{len(parts)}" == f.expected
        return True  # SIZE_ONLY: the size was checked by the caller


@dataclass
class Progress:
    """Bytes, rate and ETA: logged every ``every`` seconds and kept in progress.json."""

    store: Store
    revision: str
    total: int
    done: int
    every: float
    moved: int = 0  # bytes moved by this run (the rate)
    started: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, n: int) -> None:
        with self.lock:
            self.done += n
            self.moved += max(n, 0)
            due = time.monotonic() - self.last >= self.every
            if due:
                self.last = time.monotonic()
        if due:
            self.report()

    def snapshot(self) -> dict[str, Any]:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = self.moved / elapsed
        left = max(self.total - self.done, 0)
        return {
            "revision": self.revision,
            "bytes": self.done,
            "total_bytes": self.total,
            "percent": round(100.0 * self.done / self.total, 1) if self.total else 100.0,
            "rate_mb_s": round(rate / 1e6, 1),
            "eta_s": int(left / rate) if rate > 0 else None,
            "updated": time.time(),
            "pid": os.getpid(),
        }

    def report(self, event: str = "progress") -> None:
        snap = self.snapshot()
        self.store.write_progress(snap)
        log("info", event, **{k: v for k, v in snap.items() if k not in ("updated", "pid")})


def _write(out: BinaryIO, chunk: bytes) -> None:
    """One write (a seam: the full-disk test makes it raise ENOSPC)."""
    out.write(chunk)


def _no_space(path: Path, exc: OSError) -> FetchError:
    return FetchError(
        f"{path}: the disk filled up during the fetch ({os.strerror(exc.errno or errno.ENOSPC)}); "
        "free space or grow the claim, then re-run: the verified files and this partial file are "
        "kept and resumed",
        EXIT_NO_SPACE,
    )


def fetch_file(
    remote: Remote,
    listing: Listing,
    f: RemoteFile,
    rev: Revision,
    retry: Retry,
    progress: Progress,
    stop: threading.Event,
) -> dict[str, Any]:
    """Download, verify and move ``f`` into place; returns its manifest entry."""
    part = rev.partial / f.path
    final = rev.root / f.path
    part.parent.mkdir(parents=True, exist_ok=True)
    last = "no attempt"
    for attempt in range(1, retry.attempts + 1):
        if stop.is_set():
            raise FetchError("stopped: another file failed")
        if not part.exists():
            part.touch()  # an empty file is a file too (the hubs list 0-byte placeholders)
        have = part.stat().st_size
        if have > f.size:
            part.unlink()
            progress.add(-have)
            have = 0
        hasher = Hasher(f)
        hasher.feed_file(part, have) if have else None
        try:
            if have < f.size:
                with remote.open(listing, f, have) as stream:
                    if stream.start == 0 and have:
                        progress.add(-have)
                        have = 0
                        hasher = Hasher(f)
                    with part.open("r+b") as out:
                        out.seek(have)
                        out.truncate()
                        for chunk in stream.chunks:
                            if have + len(chunk) > f.size:
                                raise TransientError(f"the source sent more than {f.size} bytes")
                            _write(out, chunk)
                            hasher.update(chunk)
                            have += len(chunk)
                            progress.add(len(chunk))
                            if stop.is_set():
                                raise FetchError("stopped: another file failed")
                        out.flush()
                        os.fsync(out.fileno())
        except TransientError as exc:
            last = str(exc)
        except OSError as exc:
            if exc.errno in NO_SPACE:
                raise _no_space(part, exc) from None
            raise FetchError(f"{part}: cannot write: {exc}; check DEST's permissions") from None
        else:
            last = f"the source ended the file at {have} of {f.size} bytes"
        if have < f.size:
            again = "resuming from the bytes on disk" if have else "trying again"
            retry.wait(attempt, last, again, file=f.path, bytes=have)
            continue
        if not hasher.matches():
            last = f"{f.check} does not match the source's {f.expected}"
            part.unlink()
            progress.add(-have)
            again = "deleted; fetching the file again"
            retry.wait(attempt, last, again, "corrupt", file=f.path, check=f.check)
            continue
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, final)
        entry = {
            "path": f.path,
            "size": f.size,
            "sha256": hasher.sha256.hexdigest(),
            "check": f.check,
            "expected": f.expected,
        }
        rev.record(entry)
        log("info", "verified", file=f.path, size=f.size, check=f.check)
        return entry
    raise FetchError(
        f"{listing.source}: {f.path}: not verified after {retry.attempts} attempts (last: {last}); "
        "check the network or the mirror, then re-run (verified files are kept)"
    )
