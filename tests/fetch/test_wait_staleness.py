"""``fetch wait`` says a fetch is running only while one holds DEST's lease (issue 40 item 13).

After an interrupted fetch its progress file stays behind, fresh; the wait reported "the staging
Job is fetching" from it. A running fetch renews its lease; a stopped one released it (Ctrl-C) or
let it expire (killed). Both cases, each against the other, through the verb.
"""

from __future__ import annotations

import time
from pathlib import Path

from qwen_npu.fetch.layout import Store
from qwen_npu.fetch.lease import Lease, live_holder
from tests.fetch.conftest import RunFetch

WAIT = ("--source", "hf://org/model", "--timeout", "0.2", "--poll", "0.05", "--log-every", "0.05")


def _fresh_progress(dest: Path) -> Store:
    store = Store(dest)
    store.home.mkdir(parents=True, exist_ok=True)
    store.write_progress({"updated": time.time(), "bytes": 10, "total_bytes": 100, "percent": 10})
    return store


def _waiting_lines(err: str) -> list[str]:
    lines = [line for line in err.splitlines() if "event=waiting" in line]
    assert lines, err
    return lines


def test_a_fresh_progress_file_without_a_lease_is_no_fetch(
    tmp_path: Path, run_fetch: RunFetch
) -> None:
    dest = tmp_path / "m"
    _fresh_progress(dest)
    code, _, err = run_fetch("wait", str(dest), *WAIT)
    assert code == 4
    for line in _waiting_lines(err):
        assert "no fetch is running" in line and "the staging Job is fetching" not in line


def test_a_live_lease_is_a_running_fetch(tmp_path: Path, run_fetch: RunFetch) -> None:
    dest = tmp_path / "m"
    store = _fresh_progress(dest)
    with Lease(store.lock, seconds=60).held():
        code, _, err = run_fetch("wait", str(dest), *WAIT)
    assert code == 4
    assert all("the staging Job is fetching" in line for line in _waiting_lines(err))


def test_an_expired_lease_holds_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "m")
    store.home.mkdir(parents=True)
    lease = Lease(store.lock, seconds=60, clock=lambda: 1000.0)
    lease.acquire()
    assert live_holder(store.lock, clock=lambda: 1059.0) is not None
    assert live_holder(store.lock, clock=lambda: 1061.0) is None
