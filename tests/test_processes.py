"""The one process harness: start, wait for a condition or for the child to exit, stop it.

Children here are tiny Python programs (an HTTP server, a sleeper, a TERM-ignorer); every wait is
for an event, and the few short deadlines are the cases where giving up is the behaviour tested.
"""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwen_npu import processes

SLEEPER = [sys.executable, "-c", "import time; print('sleeping', flush=True); time.sleep(600)"]
IGNORES_TERM = [
    sys.executable,
    "-c",
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n",
]


def http_server_cmd(port: int) -> list[str]:
    return [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]


@pytest.fixture
def server() -> Iterator[str]:
    """An in-process HTTP server: / answers 200 (a listing), /missing 404."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_free_port_is_free_and_a_bound_one_is_not() -> None:
    port = processes.free_port()
    assert processes.port_free(port)
    assert not processes.listening(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert not processes.port_free(port)
        assert processes.listening(port)


def test_http_status(server: str) -> None:
    assert processes.http_status(server + "/") == 200
    assert processes.http_status(server + "/missing") == 404
    assert processes.http_status(f"http://127.0.0.1:{processes.free_port()}/") == 0


def test_wait_until_returns_the_first_truthy_value() -> None:
    answers = iter([None, 0, "", "done"])
    assert processes.wait_until(lambda: next(answers), what="third time lucky") == "done"


def test_wait_until_gives_up_at_its_deadline_naming_what(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    log.write_text("the tail of the log\n")
    with pytest.raises(processes.WaitTimeout, match="the moon") as info:
        processes.wait_until(lambda: False, what="the moon", timeout_s=0.1, log=log)
    assert "the tail of the log" in str(info.value)
    assert isinstance(info.value, TimeoutError)


def test_wait_until_stops_at_once_when_the_child_exits(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    proc = processes.start([sys.executable, "-c", "print('bad config'); raise SystemExit(3)"],
                           log=log)  # fmt: skip
    with pytest.raises(processes.ProcessExited, match="exited 3") as info:
        processes.wait_until(lambda: False, what="never", timeout_s=600, proc=proc, log=log)
    assert "bad config" in str(info.value)


def test_running_waits_for_the_url_and_stops_the_child(tmp_path: Path) -> None:
    port = processes.free_port()
    url = f"http://127.0.0.1:{port}/"
    with processes.running(
        http_server_cmd(port), log=tmp_path / "http.log", ready_url=url, cwd=tmp_path
    ) as proc:
        assert proc.poll() is None
        assert processes.http_status(url) == 200
    assert proc.returncode is not None
    assert processes.wait_until(lambda: processes.port_free(port), what="port released")


def test_running_stops_the_child_when_the_wait_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[subprocess.Popen[bytes]] = []
    real_start = processes.start

    def spy(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        proc = real_start(*args, **kwargs)  # type: ignore[arg-type]
        started.append(proc)
        return proc

    monkeypatch.setattr(processes, "start", spy)
    log = tmp_path / "sleeper.log"

    def ready() -> bool:
        # The wait fails once the child has written its line (an event, not a time window, so a
        # loaded machine cannot kill the child before it speaks).
        if log.exists() and "sleeping" in log.read_text():
            raise processes.WaitTimeout("never ready")
        return False

    with (
        pytest.raises(processes.WaitTimeout, match="never ready"),
        processes.running(SLEEPER, log=log, ready=ready, what="never ready"),
    ):
        pytest.fail("running() yielded although the child never became ready")
    assert started and started[0].returncode is not None
    assert "sleeping" in log.read_text()


def test_stop_kills_a_child_that_ignores_term(tmp_path: Path) -> None:
    log = tmp_path / "stubborn.log"
    proc = processes.start(IGNORES_TERM, log=log)
    processes.wait_until(lambda: "ready" in log.read_text(), what="handler installed", proc=proc)
    assert processes.stop(proc, grace_s=0.2) == -9
    assert processes.stop(proc) == -9  # stopping a stopped child only reports its status


def test_stop_ends_a_well_behaved_child_with_term(tmp_path: Path) -> None:
    proc = processes.start(SLEEPER)
    assert processes.stop(proc) == -15


def test_start_adds_to_or_replaces_the_environment(tmp_path: Path) -> None:
    show = [sys.executable, "-c", "import os; print(os.environ.get('A'), os.environ.get('PATH'))"]
    added, replaced = tmp_path / "added.log", tmp_path / "replaced.log"
    processes.start(show, log=added, env={"A": "1"}).wait()
    processes.start(show, log=replaced, env={"A": "2"}, replace_env=True).wait()
    assert added.read_text().split()[0] == "1" and added.read_text().split()[1] != "None"
    assert replaced.read_text().split() == ["2", "None"]


def test_stop_ends_a_new_session_child_and_its_children(tmp_path: Path) -> None:
    """A `make`-like child in its own session: stop signals the whole group, grandchild too."""
    pidfile = tmp_path / "grandchild.pid"
    script = f"sleep 600 & echo $! > {pidfile}; wait"
    proc = processes.start(["sh", "-c", script], new_session=True)
    grandchild = int(processes.wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(),
                                          what="the grandchild's pid"))  # fmt: skip
    processes.stop(proc, grace_s=10)
    assert proc.returncode is not None

    def gone() -> bool:
        try:
            with open(f"/proc/{grandchild}/stat") as f:
                return f.read().split()[2] == "Z"  # reaped later by init; a zombie is gone
        except FileNotFoundError:
            return True

    processes.wait_until(gone, what="the grandchild ended with its group")
