"""The whole fetch: lock, resolve, check space, transfer, manifest, marker, link, prune.

The order is the contract: the lock first, the revision resolved to an immutable id before any
write, space checked before the first byte, the marker only after every file verified, DEST moved
only after the marker. A complete revision is reused: the second run downloads nothing.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from qwen_npu.cli_parser import EXIT_BAD_INPUT, EXIT_NO_SPACE
from qwen_npu.fetch.layout import SCHEMA_VERSION, Revision, Store
from qwen_npu.fetch.lease import Lease
from qwen_npu.fetch.source import (
    HUBS,
    SIZE_ONLY,
    FetchError,
    Listing,
    Remote,
    Source,
    TransientError,
)
from qwen_npu.fetch.transfer import Progress, Retry, fetch_file
from qwen_npu.log import PartLog

log = PartLog("fetch")

T = TypeVar("T")
GIB = 1 << 30


@dataclass(frozen=True)
class Options:
    read_timeout: float = 60.0
    connect_timeout: float = 20.0
    retry: Retry = field(default_factory=Retry)
    jobs: int = 4
    lease_seconds: float = 120.0
    lock_wait_seconds: float = 6 * 3600.0
    progress_seconds: float = 30.0
    reverify: bool = False


@dataclass
class Result:
    dest: Path
    root: Path
    revision: str
    downloaded: int
    reused: bool
    manifest: dict[str, Any]


def make_remote(source: Source, opts: Options) -> Remote:
    """The client for ``source``'s scheme (imported here: only a fetch needs them)."""
    args = (source, opts.read_timeout, opts.connect_timeout)
    try:
        if source.scheme in HUBS:
            # lazy: only the source asked for loads its client
            from qwen_npu.fetch.hubs import HuggingFace, ModelScope

            return (HuggingFace if source.scheme == "hf" else ModelScope)(*args)
        # lazy: only the source asked for loads its client
        from qwen_npu.fetch.objects import ObjectStore

        return ObjectStore(*args)
    except ImportError as exc:
        raise FetchError(
            f"{source.scheme}:// needs its client ({exc.name}): pip install 'qwen-npu[fetch]' "
            "or run make setup",
            EXIT_BAD_INPUT,
        ) from None


def _retrying(what: str, fn: Callable[[], T], retry: Retry) -> T:
    for attempt in range(1, retry.attempts + 1):
        try:
            return fn()
        except TransientError as exc:
            if attempt == retry.attempts:
                raise FetchError(
                    f"{what}: failed {retry.attempts} times (last: {exc}); check the network, the "
                    "proxy (HTTPS_PROXY) and the mirror endpoint"
                ) from None
            retry.wait(attempt, exc, "trying again", what=what)
    raise AssertionError("unreachable")


def _check_space(store: Store, rev: Revision, need: int) -> None:
    partial = sum(p.stat().st_size for p in rev.partial.rglob("*") if p.is_file())
    more = max(need - partial, 0)
    free = shutil.disk_usage(store.home).free
    if more > free:
        raise FetchError(
            f"{store.dest}: not enough space: the checkpoint needs {more} bytes "
            f"({more / GIB:.1f} GiB) more, the filesystem has {free} bytes ({free / GIB:.1f} GiB) "
            "free; grow the claim or free space (older revisions live in "
            f"{store.home / 'revs'})",
            EXIT_NO_SPACE,
        )
    log("info", "space_ok", need_bytes=more, free_bytes=free)


def _manifest(listing: Listing, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "source": listing.source.location,
        "requested_revision": listing.source.revision,
        "revision": listing.revision,
        "total_size": listing.total_size,
        "files": sorted(entries, key=lambda e: str(e["path"])),
    }


def fetch(source: Source, dest: Path, opts: Options) -> Result:
    store = Store(dest)
    if store.foreign():
        raise FetchError(
            f"{dest}: exists and was not made by qwen-npu fetch; pass a new path (fetch makes DEST "
            f"a link into {store.home.name}/revs/) or remove it",
            EXIT_BAD_INPUT,
        )
    remote = make_remote(source, opts)
    store.home.mkdir(parents=True, exist_ok=True)
    try:
        lease = Lease(store.lock, opts.lease_seconds, opts.lock_wait_seconds)
        with lease.held():
            return _locked(store, source, remote, opts, lease.lost)
    finally:
        with contextlib.suppress(OSError):  # nothing was written (bad input): leave no trace
            store.home.rmdir()


def _locked(
    store: Store, source: Source, remote: Remote, opts: Options, stop: threading.Event
) -> Result:
    """Resolve, then reuse a complete revision or transfer what is missing (under the lock)."""
    dest = store.dest
    listing = _retrying(f"{source}: resolving the revision", remote.resolve, opts.retry)
    log(
        "info",
        "resolved",
        source=source.location,
        requested=source.revision or "default",
        revision=listing.revision,
        files=len(listing.files),
        total_bytes=listing.total_size,
    )
    rev = Revision(store.rev_dir(listing.revision))
    bad = rev.problems(sums=opts.reverify) if rev.manifest() is not None else {"": ""}
    if not bad:
        if store.current() != rev.root:
            store.point_to(rev.root)
        log(
            "info",
            "reused",
            dest=dest,
            revision=listing.revision,
            verified="sizes and sums" if opts.reverify else "sizes (sums verified when fetched)",
            next="nothing to download",
        )
        return Result(dest, rev.root, listing.revision, 0, True, rev.manifest() or {})
    if rev.manifest() is not None:
        for name, why in bad.items():  # damaged after it was fetched: fetch those files again
            log("warning", "damaged", file=name, why=why, next="fetching the file again")
            (rev.root / name).unlink(missing_ok=True)
    return _transfer(store, rev, listing, remote, opts, stop)


def _transfer(
    store: Store,
    rev: Revision,
    listing: Listing,
    remote: Remote,
    opts: Options,
    stop: threading.Event,
) -> Result:
    rev.partial.mkdir(parents=True, exist_ok=True)
    (rev.meta / "complete").unlink(missing_ok=True)  # a re-check that failed: not complete now
    done = rev.verified()
    todo = [f for f in listing.files if f.path not in done]
    _check_space(store, rev, sum(f.size for f in todo))
    for f in todo:
        if f.check == SIZE_ONLY:
            log(
                "warning",
                "unverifiable",
                file=f.path,
                next="the source publishes no sum for this file: only its size is checked",
            )
    partial_bytes = sum(
        (rev.partial / f.path).stat().st_size for f in todo if (rev.partial / f.path).is_file()
    )
    already = sum(int(e["size"]) for e in done.values())
    progress = Progress(
        store, listing.revision, listing.total_size, already + partial_bytes, opts.progress_seconds
    )
    progress.report("start")
    entries = list(done.values())
    with cf.ThreadPoolExecutor(max_workers=max(opts.jobs, 1), thread_name_prefix="fetch") as pool:
        futures = [
            pool.submit(fetch_file, remote, listing, f, rev, opts.retry, progress, stop)
            for f in sorted(todo, key=lambda x: -x.size)
        ]
        try:
            for fut in cf.as_completed(futures):
                entries.append(fut.result())
        except BaseException:
            stop.set()
            for fut in futures:
                fut.cancel()
            raise
    if stop.is_set():
        raise FetchError(f"{store.lock}: another fetch took the lock; this one stopped writing")
    progress.report("downloaded")
    manifest = _manifest(listing, entries)
    rev.complete(manifest)
    previous = store.current()
    store.point_to(rev.root)
    gone = store.prune([p for p in (rev.root, previous) if p is not None])
    store.progress.unlink(missing_ok=True)
    log(
        "info",
        "complete",
        dest=store.dest,
        revision=listing.revision,
        files=len(entries),
        bytes=listing.total_size,
        downloaded=progress.moved,
        pruned=len(gone),
        previous=previous.name if previous and previous != rev.root else None,
    )
    return Result(store.dest, rev.root, listing.revision, progress.moved, False, manifest)


#: The variables each client reads its CA bundle from (httpx, requests, botocore).
CA_BUNDLE_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE")


def environ_ca_bundle(path: str) -> None:
    """Point every client at one CA bundle (httpx, requests and botocore read different names)."""
    for name in CA_BUNDLE_ENV:
        os.environ[name] = path
