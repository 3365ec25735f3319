"""Start a process, wait until it answers, stop it: the one harness for tests, the demo and perf,
so every caller's failure says the same: what was awaited, for how long, and the tail of the
child's log. Waits poll a condition up to a generous deadline (a slow machine waits longer, it does
not fail), or end at once when the child exits. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TypedDict, TypeVar, Unpack

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 60.0


class WaitTimeout(TimeoutError):
    """The awaited condition did not hold in time."""


class ProcessExited(RuntimeError):
    """The child exited while we waited for it to become ready."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def http_status(url: str, timeout: float = 2.0) -> int:
    """The HTTP status of a GET (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


def log_tail(log: Path | None, chars: int = 2000) -> str:
    if log is None or not log.exists():
        return ""
    return log.read_text(errors="replace")[-chars:]


def wait_until(
    check: Callable[[], T],
    *,
    what: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = 0.02,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> T:
    """Poll ``check`` until it returns something truthy, and return that; ``ProcessExited`` at
    once if ``proc`` exits, ``WaitTimeout`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if proc is not None and proc.poll() is not None:
            raise ProcessExited(
                f"{what}: the process exited {proc.returncode} first\n{log_tail(log)}"
            )
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{what}: not within {timeout_s:.0f} s\n{log_tail(log)}")
        time.sleep(interval_s)


def wait_http(
    url: str,
    *,
    what: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    wait_until(
        lambda: http_status(url) == 200,
        what=what or f"GET {url} -> 200",
        timeout_s=timeout_s,
        interval_s=0.05,
        proc=proc,
        log=log,
    )


def stop(proc: subprocess.Popen[bytes], grace_s: float = 10.0, sig: int = signal.SIGTERM) -> int:
    """Send ``sig``, wait ``grace_s``, then SIGKILL; return the exit status. A child started with
    ``new_session=True`` gets the signals as a whole process group (a ``make`` and its children)."""

    def send(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig) if os.getpgid(proc.pid) == proc.pid else proc.send_signal(sig)

    if proc.poll() is None:
        send(sig)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            send(signal.SIGKILL)
            proc.wait(timeout=10)
    return int(proc.returncode)


def start(
    cmd: Sequence[str],
    *,
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
    replace_env: bool = False,
    cwd: Path | None = None,
    new_session: bool = False,
    inherit_output: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with stdout and stderr in ``log`` (or discarded, or this process's with
    ``inherit_output``) and no stdin; ``env`` adds to this process's environment, or replaces it
    with ``replace_env``."""
    child_env = dict(env or {}) if replace_env else {**os.environ, **(env or {})}
    out: IO[bytes] | int | None = None if inherit_output else subprocess.DEVNULL
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        out = log.open("wb")
    try:
        return subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=None if out is None else subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_env,
            cwd=cwd,
            start_new_session=new_session,
        )
    finally:
        if out is not None and not isinstance(out, int):
            out.close()


class StartOptions(TypedDict, total=False):  # what ``running`` hands on to ``start``
    log: Path | None
    env: Mapping[str, str] | None
    replace_env: bool
    cwd: Path | None
    new_session: bool


@contextlib.contextmanager
def running(
    cmd: Sequence[str],
    *,
    ready_url: str | None = None,
    ready: Callable[[], object] | None = None,
    what: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    grace_s: float = 10.0,
    **options: Unpack[StartOptions],
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``cmd``, wait for ``ready_url`` to answer 200 and/or ``ready()``, yield, then stop it
    whatever happens (the wait's failure included)."""
    label = what or os.path.basename(str(cmd[0]))
    log = options.get("log")
    proc = start(cmd, **options)
    try:
        if ready_url is not None:
            wait_http(
                ready_url, what=f"{label} at {ready_url}", timeout_s=timeout_s, proc=proc, log=log
            )
        if ready is not None:
            wait_until(ready, what=label, timeout_s=timeout_s, proc=proc, log=log)
        yield proc
    finally:
        stop(proc, grace_s=grace_s)
