"""``qwen-npu fetch wait DEST --source SOURCE``: the engine pod's init container.

The engine must not load a checkpoint still arriving, nor another revision: this returns when DEST
holds a complete fetch of the same SOURCE and revision whose files match the manifest, logging the
fetch's progress meanwhile. Standard library only: it runs in the engine image.
"""

from __future__ import annotations

import time

from qwen_npu.cli_parser import EXIT_FAILED, EXIT_TIMED_OUT
from qwen_npu.fetch.layout import Revision, Store
from qwen_npu.fetch.lease import live_holder
from qwen_npu.fetch.source import FetchError, Source
from qwen_npu.log import PartLog

log = PartLog("fetch")

#: A live lease (lease.live_holder) says a fetch runs; no progress for this long: it is stuck.
STALE_SECONDS = 300.0
PROGRESS_KEYS = ("bytes", "total_bytes", "percent", "rate_mb_s", "eta_s", "stale_s")


def matches(marker: dict[str, object] | None, source: Source) -> bool:
    return (
        marker is not None
        and marker.get("source") == source.location
        and marker.get("requested_revision") == source.revision
    )


def wait(
    store: Store,
    source: Source,
    *,
    sums: bool = True,
    timeout: float = 6 * 3600.0,
    interval: float = 60.0,
    poll: float = 2.0,
) -> Revision:
    deadline = time.monotonic() + timeout
    logged = float("-inf")
    while True:
        current = store.current()
        rev = Revision(current) if current is not None else None
        marker = rev.marker() if rev is not None else None
        if rev is not None and matches(marker, source):
            problems = rev.check(sums=sums)
            if problems:
                raise FetchError(
                    f"{store.dest}: complete at {marker and marker.get('revision')} but "
                    f"{len(problems)} file(s) differ from the manifest ({problems[0]}); re-run the "
                    "fetch (it fetches the damaged files again)",
                    EXIT_FAILED,
                )
            log(
                "info",
                "ready",
                dest=store.dest,
                revision=marker and marker.get("revision"),
                checked="sizes and sha256" if sums else "sizes",
            )
            return rev
        if time.monotonic() > deadline:
            raise FetchError(
                f"{store.dest}: no complete fetch of {source} after {timeout:.0f}s; check the "
                "staging Job's log (kubectl logs job/<release>-fetch-...)",
                EXIT_TIMED_OUT,
            )
        if time.monotonic() - logged >= interval:
            logged = time.monotonic()
            # A fetch runs while its lease is live, not while its progress file is recent: an
            # interrupted fetch leaves the file behind (issue 40), its lock goes with it.
            holder = live_holder(store.lock)
            progress = store.read_progress() or {}
            age = time.time() - float(progress.get("updated", time.time()))
            if progress and (holder is None or age > STALE_SECONDS):
                progress = {"stale_s": int(age)}
            log(
                "info",
                "waiting",
                dest=store.dest,
                source=source,
                have=(marker or {}).get("revision") if marker else None,
                **{key: progress.get(key) for key in PROGRESS_KEYS},
                fetching=holder.get("owner") if holder else None,
                next="the staging Job is fetching"
                if holder is not None and "stale_s" not in progress
                else "no fetch is running: check that the staging Job exists and its log",
            )
        time.sleep(poll)
