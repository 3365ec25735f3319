"""One writer per DEST: an ``O_EXCL`` lock file with a lease, renewed while the fetch runs.

``O_EXCL`` works on NFS-style RWX claims where ``flock`` may not cross nodes; the lease frees the
lock when its holder dies uncleanly. A second fetch waits, then reuses the complete checkpoint.
Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_npu.cli_parser import EXIT_TIMED_OUT
from qwen_npu.fetch.layout import read_object
from qwen_npu.fetch.source import FetchError
from qwen_npu.log import PartLog

log = PartLog("fetch")
POLL_SECONDS = 0.5  # between tries of a held lock


def live_holder(path: Path, clock: Callable[[], float] = time.time) -> dict[str, Any] | None:
    """The lock's holder while its lease is live, else None (whatever its progress file says)."""
    holder = read_object(path)
    if holder is None:
        return None
    try:
        expires = float(holder.get("expires", 0))
    except (TypeError, ValueError):
        return None
    return holder if expires >= clock() else None


@dataclass
class Lease:
    """``with Lease(path, seconds).held(): ...`` holds the lock, renewing it every seconds/3."""

    path: Path
    seconds: float = 120.0
    wait_seconds: float = 6 * 3600.0
    clock: Callable[[], float] = time.time
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    owner: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    _stop: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)  # another fetch took the lock

    def _body(self) -> bytes:
        expires = self.clock() + self.seconds
        return json.dumps({"owner": self.owner, "token": self.token, "expires": expires}).encode()

    def _try_create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as out:
            out.write(self._body())
        return True

    def _break_if_expired(self, seen: dict[str, Any]) -> None:
        """Move an expired lock aside; put it back if another waiter renewed it meanwhile."""
        aside = self.path.with_name(f"{self.path.name}.expired.{self.token}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        now = read_object(aside)
        if now is not None and now.get("token") != seen.get("token"):
            with contextlib.suppress(FileExistsError):  # a fresh holder's lock: give it back
                os.link(aside, self.path)
        aside.unlink(missing_ok=True)
        log(
            "warning",
            "lock_expired",
            lock=self.path,
            owner=seen.get("owner"),
            next="the previous fetch died without releasing its lock; this one takes over",
        )

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.wait_seconds
        logged = 0.0
        while not self._try_create():
            holder = read_object(self.path)
            if holder is not None and float(holder.get("expires", 0)) < self.clock():
                self._break_if_expired(holder)
                continue
            if time.monotonic() > deadline:
                raise FetchError(
                    f"{self.path}: another fetch ({(holder or {}).get('owner', '?')}) held "
                    f"the lock for more than {self.wait_seconds:.0f}s; check that fetch's log, or "
                    "delete the lock file if no fetch runs",
                    EXIT_TIMED_OUT,
                )
            if time.monotonic() - logged > 30:
                log(
                    "info",
                    "lock_wait",
                    lock=self.path,
                    owner=(holder or {}).get("owner"),
                    next="another fetch writes this DEST; this one reuses its result when done",
                )
                logged = time.monotonic()
            time.sleep(POLL_SECONDS)

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            tmp = self.path.with_name(f"{self.path.name}.{self.token}")
            holder = read_object(self.path)
            if holder is None or holder.get("token") != self.token:
                log(
                    "error",
                    "lock_lost",
                    lock=self.path,
                    next="another fetch took the lock (this one stalled past its lease): stopping",
                )
                self.lost.set()
                return
            tmp.write_bytes(self._body())
            os.replace(tmp, self.path)

    def release(self) -> None:
        self._stop.set()
        holder = read_object(self.path)
        if holder is not None and holder.get("token") == self.token:
            self.path.unlink(missing_ok=True)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.acquire()
        renewer = threading.Thread(target=self._renew, name="fetch-lease", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            self.release()
