"""Start a process, wait until it answers, stop it: the one harness for tests, the demo and perf.

Why this exists: the simulator, the sidecar, Prometheus, the router and the demo are all started
the same way (a child process with its output in a log file, a readiness condition polled until it
holds or the child dies, then terminate and, if it lingers, kill). Writing that once keeps every
caller's failure message the same: what was awaited, for how long, and the tail of the child's log.

Waiting is event-driven: ``wait_until`` polls a condition with a short sleep and gives up only at a
generous deadline (a slow machine waits longer, it does not fail), or at once when the child exits.
Standard library only, so the engine image can import it too.
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
from typing import IO, TypeVar

T = TypeVar("T")

#: How long a readiness wait lasts by default: generous, since a loaded CI machine is slow.
DEFAULT_TIMEOUT_S = 60.0


class WaitTimeout(TimeoutError):
    """The awaited condition did not hold in time (the message says what, and the log tail)."""


class ProcessExited(RuntimeError):
    """The child exited while we waited for it to become ready."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago on ``host`` (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` and it can be bound."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """True when a TCP connect to ``host:port`` succeeds."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def http_status(url: str, timeout: float = 2.0, headers: Mapping[str, str] | None = None) -> int:
    """The HTTP status of a GET (0 when nothing answers)."""
    req = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


def log_tail(log: Path | None, chars: int = 2000) -> str:
    """The end of a child's log file, for error messages ('' without one)."""
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
    """Poll ``check`` until it returns something truthy, and return that.

    Raises ``ProcessExited`` at once if ``proc`` exits meanwhile, ``WaitTimeout`` after
    ``timeout_s``; both messages name ``what`` and carry the tail of ``log``.
    """
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
    status: int = 200,
    what: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Wait until GET ``url`` answers ``status``."""
    wait_until(
        lambda: http_status(url, headers=headers) == status,
        what=what or f"GET {url} -> {status}",
        timeout_s=timeout_s,
        interval_s=0.05,
        proc=proc,
        log=log,
    )


def _leads_group(proc: subprocess.Popen[bytes]) -> bool:
    """True when ``proc`` was started in a session of its own (``new_session=True``)."""
    try:
        return os.getpgid(proc.pid) == proc.pid
    except ProcessLookupError:
        return False


def stop(proc: subprocess.Popen[bytes], grace_s: float = 10.0, sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` (SIGTERM), wait ``grace_s``, then SIGKILL; return the exit status.

    A child started with ``new_session=True`` gets the signals as a whole process group (a
    ``make`` and what it started).
    """
    if proc.poll() is None:
        group = _leads_group(proc)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL) if group else proc.kill()
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
    """Start ``cmd`` with stdout and stderr in ``log`` (or discarded) and no stdin.

    ``env`` adds to this process's environment, or replaces it with ``replace_env=True``;
    ``new_session`` starts it in a process group of its own (``stop`` then signals the group);
    ``inherit_output`` keeps this process's stdout and stderr (no ``log``).
    """
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


@contextlib.contextmanager
def running(
    cmd: Sequence[str],
    *,
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
    replace_env: bool = False,
    cwd: Path | None = None,
    new_session: bool = False,
    ready_url: str | None = None,
    ready: Callable[[], object] | None = None,
    what: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    grace_s: float = 10.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``cmd``, wait for ``ready_url`` to answer 200 and/or ``ready()``, yield, then stop it.

    The child is stopped (SIGTERM, then SIGKILL after ``grace_s``) whatever happens, including
    when the wait fails.
    """
    label = what or os.path.basename(str(cmd[0]))
    proc = start(cmd, log=log, env=env, replace_env=replace_env, cwd=cwd, new_session=new_session)
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


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ProcessExited",
    "WaitTimeout",
    "free_port",
    "http_status",
    "listening",
    "log_tail",
    "port_free",
    "running",
    "start",
    "stop",
    "wait_http",
    "wait_until",
]
