"""Every verb against bad input, discovered from the CLI itself, not listed (issue 40).

Why this exists: a new user types what they type; a verb must answer a missing, empty, binary or
unreadable file, a folder where a file goes, a path under a regular file, 0, -1, inf, nan or a
word where a number goes, and a closed stdout with one line and the exit code of docs/cli.md,
never a traceback and never half a file. The verbs come from ``qwen_npu.cli.VERBS``; each one's
parser is taken from its own entry point (``main([... "--help"])``, the parse intercepted), its
argparse subcommands walked, and a verb that dispatches words itself lists them in
``SUBCOMMANDS`` (``qwen-npu fetch wait|verify``). So a new verb, subcommand or flag is covered
without editing this file. What an option is comes from the option itself:

- a number: its ``type=`` is a ``cli_parser.Number`` (which says what it accepts); an option that
  takes a number any other way (``type=int``, a metavar INT or FLOAT, a numeric default) fails
  ``test_every_number_option_is_range_checked_by_the_parser``;
- an output path: its ``type=`` is a ``cli_parser.OutputPath`` (``output_file``, ``output_dir``);
- an input file or folder: a ``type=`` whose name says file or folder/dir, or a metavar FILE, DIR,
  MODEL_DIR (strict: each bad class refused, exit 2, one line naming it); a plain ``type=Path``
  or metavar ``Path`` (lenient: any answer but a traceback).

The cases run in-process through ``qwen_npu.cli.main`` (the CLI's edge included), stdout and
stderr captured, in a sandbox folder that must be unchanged after a refusal. A verb that accepts
the input and goes on (a socket, a server, a child process: a Python audit hook sees it) is
stopped there: for the strict classes that is a failure (the input was not checked before the
work started). Each case has a time bound. Subprocesses only where one is needed: a closed stdout
(a pipe whose reader is closed before the verb starts) and Ctrl-C.

The unreadable class is real although the tests run as root (root reads a mode-000 file): for
that case the calling thread drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from its effective
capabilities (capset(2); they stay permitted, so it takes them back after). Root then passes only
the permission bits: the mode-000 file is refused as for a user, while the checkout, the venv
and the standard library (root's own, whatever the mode of the folder they lie in) still read;
the case fails if the file is readable after all. The read-only folder of an output path is real
the same way.

All of it runs in a network namespace of its own with only loopback (``unshare -n``, or ``-rn``
when not root): ``test_the_suite_in_a_network_namespace`` re-runs this file there, every remote
pointed at a closed local port.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from qwen_npu.cli import VERBS
from qwen_npu.cli import main as cli_main
from qwen_npu.cli_parser import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    Number,
    OutputPath,
)
from tools.paths import REPO

NETNS = "QWEN_NPU_BAD_INPUT_NETNS"
INSIDE = os.environ.get(NETNS) == "1"
inside = pytest.mark.skipif(not INSIDE, reason="runs in test_the_suite_in_a_network_namespace")

#: Seconds one in-process case may take (a refusal takes milliseconds; the first case of a verb
#: imports it).
CASE_SECONDS = 20
#: The exit codes of docs/cli.md a refusal may end in.
ERROR_CODES = {1, 2, 3, 4}
NUMBERS = ("0", "-1", "inf", "nan", "x")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CLOSED_URL = f"http://127.0.0.1:{_closed_port()}"
#: Every remote a verb may reach, pointed at the closed port.
REMOTES = {
    "HF_ENDPOINT": CLOSED_URL,
    "MODELSCOPE_ENDPOINT": CLOSED_URL,
    "MODELSCOPE_DOMAIN": CLOSED_URL.removeprefix("http://"),
    "OBS_ENDPOINT": CLOSED_URL,
    "AWS_ENDPOINT_URL": CLOSED_URL,
    "QWEN_NPU_BENCH_TARGET": CLOSED_URL,
    "NO_PROXY": "*",
}


# -- discovery ------------------------------------------------------------------------------------


class _Captured(BaseException):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def _capture(verb: str, words: tuple[str, ...]) -> argparse.ArgumentParser:
    """The parser ``qwen-npu <verb> <words>`` parses its command line with."""
    module = importlib.import_module(VERBS[verb][0])
    original = argparse.ArgumentParser.parse_known_args

    def grab(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        if self.prog.startswith("qwen-npu"):
            raise _Captured(self)
        return original(self, *args, **kwargs)

    argparse.ArgumentParser.parse_known_args = grab  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            module.main([*words, "--help"])
    except _Captured as got:
        return got.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    raise AssertionError(f"qwen-npu {verb} {' '.join(words)} --help parsed nothing")


@dataclass(frozen=True)
class Command:
    verb: str
    words: tuple[str, ...]
    parser: argparse.ArgumentParser

    @property
    def name(self) -> str:
        return " ".join(["qwen-npu", self.verb, *self.words])


def discover() -> list[Command]:
    found = []
    for verb in VERBS:
        module = importlib.import_module(VERBS[verb][0])
        for words in [(), *((w,) for w in getattr(module, "SUBCOMMANDS", ()))]:
            stack = [(words, _capture(verb, words))]
            while stack:
                path, parser = stack.pop()
                found.append(Command(verb, path, parser))
                for action in parser._actions:
                    if isinstance(action, argparse._SubParsersAction):
                        stack += [((*path, n), p) for n, p in action.choices.items()]
    return found


@dataclass(frozen=True)
class Option:
    command: Command
    action: argparse.Action

    @property
    def flag(self) -> str | None:
        strings = self.action.option_strings
        return max(strings, key=len) if strings else None

    @property
    def id(self) -> str:
        return f"{self.command.name} {self.flag or self.action.metavar or self.action.dest}"


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0 and not isinstance(
        action, argparse._SubParsersAction | argparse._HelpAction | argparse._VersionAction
    )


def options(commands: list[Command]) -> list[Option]:
    return [Option(c, a) for c in commands for a in c.parser._actions if _takes_value(a)]


def _type_name(action: argparse.Action) -> str:
    kind = action.type
    return str(getattr(kind, "__name__", type(kind).__name__))


#: How an option that takes a path says so: the kind of path and whether each bad class must be
#: refused (strict) or only answered without a traceback (lenient).
FILE, DIR, OUT_FILE, OUT_DIR, PATH = "file", "dir", "output file", "output dir", "path"


def path_kind(action: argparse.Action) -> str | None:
    if isinstance(action.type, OutputPath):
        return OUT_DIR if action.type.folder else OUT_FILE
    name = _type_name(action).lower()
    metavar = str(action.metavar or "")
    if action.type is not None and action.type is not Path:
        if re.search(r"file", name):
            return FILE
        if re.search(r"folder|dir", name):
            return DIR
    if metavar in ("FILE", "PEM", "JSONL", "YAML"):
        return FILE
    if metavar in ("DIR", "MODEL_DIR", "FOLDER"):
        return DIR
    if action.type is Path or metavar == "Path":
        return PATH
    return None


def numeric_without_number(action: argparse.Action) -> bool:
    """An option that takes a number but whose parser does not range-check it."""
    if isinstance(action.type, Number):
        return False
    default = action.default
    return (
        action.type in (int, float)
        or str(action.metavar) in ("INT", "FLOAT", "int", "float", "N", "SECONDS")
        or (isinstance(default, int | float) and not isinstance(default, bool))
    )


COMMANDS = discover() if INSIDE else []
OPTIONS = options(COMMANDS)


# -- the sandbox, the fence and the run -----------------------------------------------------------


class WentOn(BaseException):
    """The verb accepted its input and reached for a socket, a server or a child process."""


class TimedOut(BaseException):
    pass


_FENCE = {"on": False}
_FENCED = {"socket.connect", "socket.bind", "socket.getaddrinfo", "subprocess.Popen",
           "os.posix_spawn", "os.fork", "os.exec"}  # fmt: skip


#: Importing a load generator or a server is going on too (locust's gevent would also patch this
#: whole process's sockets, ssl and time).
_FENCED_IMPORTS = {"locust", "gevent", "uvicorn"}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _FENCE["on"] and event == "import" and args and args[0] in _FENCED_IMPORTS:
        _FENCE["on"] = False
        raise WentOn(f"import {args[0]}")
    if _FENCE["on"] and event in _FENCED:
        _FENCE["on"] = False
        raise WentOn(f"{event} {args!r:.120}")


if INSIDE:
    sys.addaudithook(_audit)

_sleep = time.sleep


def _fenced_sleep(seconds: float) -> None:
    """A verb that sleeps has accepted its input and waits for something (fetch wait's DEST)."""
    if _FENCE["on"]:
        _FENCE["on"] = False
        raise WentOn(f"time.sleep({seconds})")
    _sleep(seconds)


@dataclass
class Outcome:
    code: int | None
    out: str
    err: str
    went_on: str | None
    written: list[str]

    def lines(self) -> list[str]:
        """stderr's lines, the progress log lines (logfmt, JSON) left out."""
        return [
            line
            for line in self.err.splitlines()
            if line.strip() and not line.startswith(("qwen_npu.", "{", "qwen-npu-", "level="))
        ]


def _tree(root: Path) -> set[str]:
    found = set()
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(folder, name), root))
    return found


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_CAP_VERSION_3 = 0x20080522  # linux/capability.h: two 32-bit words per set
_DAC_CAPS = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH


def _capset(libc: ctypes.CDLL, effective: int | None = None) -> int:
    """This thread's effective capabilities (word 0), set to ``effective`` when given."""
    header, data = _CapHeader(_CAP_VERSION_3, 0), (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    before = int(data[0].effective)
    if effective is not None:
        data[0].effective = effective
        if libc.capset(ctypes.byref(header), data) != 0:
            raise OSError(ctypes.get_errno(), "capset")
    return before


@contextlib.contextmanager
def unprivileged() -> Iterator[None]:
    """Root without the file-permission override (a user's view of the mode bits); restored."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    before = _capset(libc)
    _capset(libc, before & ~_DAC_CAPS)
    try:
        yield
    finally:
        _capset(libc, before)


def run(argv: list[str], sandbox: Path, unprivileged_: bool = False) -> Outcome:
    """``qwen-npu <argv>`` in-process through the CLI's edge, fenced and bounded in time."""
    out, err = io.StringIO(), io.StringIO()
    before = _tree(sandbox)
    environ = dict(os.environ)  # a verb may set the process's (fetch --ca-bundle): undone after
    went_on = None
    code: int | None

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimedOut(f"{' '.join(argv)}: still running after {CASE_SECONDS} s")

    time.sleep = _fenced_sleep
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            unprivileged() if unprivileged_ else contextlib.nullcontext(),
        ):
            _FENCE["on"] = True
            try:
                code = cli_main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except WentOn as exc:
                code, went_on = None, str(exc)
            finally:
                _FENCE["on"] = False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        time.sleep = _sleep
        os.environ.clear()
        os.environ.update(environ)
    written = sorted(_tree(sandbox) - before)
    return Outcome(code, out.getvalue(), err.getvalue(), went_on, written)


@pytest.fixture()
def sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of the case's own, its working directory, with the environment's remotes at a
    closed port and no QWEN_NPU_ setting inherited."""
    root = Path(tempfile.mkdtemp(prefix="qwen-npu-bad-input-"))
    for key in list(os.environ):
        if key.startswith("QWEN_NPU_") and key != NETNS:
            monkeypatch.delenv(key)
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(key, raising=False)
    for key, value in REMOTES.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(root / "home"))
    monkeypatch.chdir(root)
    (root / "good.txt").write_text("key: value\n")
    (root / "good-dir").mkdir()
    yield root
    for folder, dirs, _ in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o755)
    shutil.rmtree(root, ignore_errors=True)


# -- fillers: a plausible value for each required argument but the one under test -----------------


def filler(action: argparse.Action, sandbox: Path) -> str:
    if action.choices:
        return str(next(iter(action.choices)))
    if isinstance(action.type, Number):
        low = action.type.low
        return str(1 if low is None or low <= 0 else int(low) + 1)
    kind = path_kind(action)
    if kind in (FILE, PATH):
        return str(sandbox / "good.txt")
    if kind == DIR:
        return str(sandbox / "good-dir")
    if kind in (OUT_FILE, OUT_DIR):
        return str(sandbox / "new" / "out")
    name = f"{action.metavar or ''} {action.dest}".lower()
    if "source" in name:
        return "hf://org/model"
    if "url" in (action.help or "").lower() or "url" in name or "target" in name:
        return CLOSED_URL
    return "x"


def argv_for(option: Option, value: str, sandbox: Path) -> list[str]:
    """``verb [words] <required fillers> <the option with value>``."""
    command = option.command
    argv = [command.verb, *command.words]
    tail: list[str] = []
    for action in command.parser._actions:
        if not _takes_value(action):
            continue
        if action is option.action:
            if action.option_strings:
                tail += [f"{option.flag}={value}"]
            else:
                argv.append(value)
            continue
        if not action.option_strings and action.nargs not in ("?", "*", argparse.REMAINDER):
            argv.append(filler(action, sandbox))
        elif action.required:
            argv += [action.option_strings[0], filler(action, sandbox)]
    return argv + tail


# -- the bad inputs -------------------------------------------------------------------------------


def make_value(cls: str, sandbox: Path) -> tuple[str, bool]:
    """(the path of class ``cls`` in the sandbox, whether to run without the DAC override)."""
    if cls == "missing":
        return str(sandbox / "no-such"), False
    if cls == "directory":
        (sandbox / "a-dir").mkdir(exist_ok=True)
        return str(sandbox / "a-dir"), False
    if cls == "empty file":
        (sandbox / "empty").write_bytes(b"")
        return str(sandbox / "empty"), False
    if cls == "binary file":
        (sandbox / "binary").write_bytes(bytes(range(256)) * 4)
        return str(sandbox / "binary"), False
    if cls == "under a regular file":
        return str(sandbox / "good.txt" / "x"), False
    if cls == "unreadable file":
        path = sandbox / "unreadable"
        path.write_text("key: value\n")
        path.chmod(0)
        return str(path), True
    if cls == "unreadable folder":
        path = sandbox / "unreadable-dir"
        path.mkdir()
        (path / "config.json").write_text("{}")
        path.chmod(0)
        return str(path), True
    if cls == "read-only folder":
        path = sandbox / "read-only"
        path.mkdir()
        path.chmod(0o555)
        return str(path / "out"), True
    raise AssertionError(cls)


#: kind -> (classes each must be refused with exit 2, classes that need only a clean answer)
POLICY: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    FILE: (
        ("missing", "directory", "under a regular file", "unreadable file"),
        ("empty file", "binary file"),
    ),
    DIR: (
        ("missing", "empty file", "under a regular file", "unreadable folder"),
        ("directory", "binary file"),
    ),
    OUT_FILE: (("directory", "under a regular file", "read-only folder"), ()),
    OUT_DIR: (("empty file", "under a regular file", "read-only folder"), ()),
    PATH: (
        (),
        ("missing", "directory", "empty file", "binary file", "under a regular file",
         "unreadable file"),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Case:
    option: Option
    value: str  # a number, or a path class
    strict: bool

    @property
    def id(self) -> str:
        return f"{self.option.id}={self.value}"


def number_cases() -> list[Case]:
    cases = []
    for option in OPTIONS:
        number = option.action.type
        if isinstance(number, Number):
            for value in NUMBERS:
                as_float = float(value) if value != "x" else float("nan")
                if not number.accepts(as_float):
                    cases.append(Case(option, value, strict=True))
    return cases


def path_cases() -> list[Case]:
    cases = []
    for option in OPTIONS:
        kind = path_kind(option.action)
        if kind is None:
            continue
        strict, lenient = POLICY[kind]
        cases += [Case(option, cls, strict=True) for cls in strict]
        cases += [Case(option, cls, strict=False) for cls in lenient]
    return cases


NUMBER_CASES = number_cases()
PATH_CASES = path_cases()


def _assert_clean(case: Case, argv: list[str], got: Outcome) -> None:
    said = f"{' '.join(argv)} -> exit {got.code}, went on: {got.went_on}\n{got.err}"
    assert "Traceback" not in got.err + got.out, said
    assert len(got.lines()) <= 1, said
    if got.went_on is None and got.code not in (0, None):
        assert got.code in ERROR_CODES, said
        assert len(got.lines()) == 1, said
        assert got.lines()[0].startswith("qwen-npu"), said
        assert ": error: " in got.lines()[0], said


def _assert_refused(case: Case, argv: list[str], got: Outcome, named: list[str]) -> None:
    said = f"{' '.join(argv)} -> exit {got.code}, went on: {got.went_on}\n{got.err}"
    assert got.went_on is None, f"went on without checking the input: {said}"
    assert got.code == EXIT_BAD_INPUT, said
    assert len(got.lines()) == 1, said
    line = got.lines()[0]
    assert line.startswith(f"qwen-npu {case.option.command.verb}"), said
    assert ": error: " in line, said
    assert any(n in line for n in named), f"the line names none of {named}: {said}"
    assert got.written == [], f"left {got.written} behind: {said}"


@inside
@pytest.mark.parametrize("case", NUMBER_CASES, ids=[c.id for c in NUMBER_CASES])
def test_a_bad_number_is_refused_by_the_parser(case: Case, sandbox: Path) -> None:
    argv = argv_for(case.option, case.value, sandbox)
    got = run(argv, sandbox)
    _assert_clean(case, argv, got)
    _assert_refused(case, argv, got, list(case.option.action.option_strings))


@inside
@pytest.mark.parametrize("case", PATH_CASES, ids=[c.id for c in PATH_CASES])
def test_a_bad_path_is_one_line(case: Case, sandbox: Path) -> None:
    value, restricted = make_value(case.value, sandbox)
    argv = argv_for(case.option, value, sandbox)
    got = run(argv, sandbox, unprivileged_=restricted)
    if restricted and os.geteuid() == 0:
        with unprivileged(), pytest.raises(PermissionError):  # the class is real: root cannot
            target = Path(value)
            if case.value == "read-only folder":
                (target.parent / "probe").write_text("")
            elif target.is_dir():
                os.listdir(target)
            else:
                target.read_bytes()
    _assert_clean(case, argv, got)
    if case.strict:
        named = [value, *case.option.action.option_strings]
        if case.value == "read-only folder":
            named.append(str(Path(value).parent))
        _assert_refused(case, argv, got, named)


# -- what the discovery must find, so that the suite cannot pass by finding nothing ---------------


@inside
def test_the_discovery_finds_every_verb_and_the_options_it_must() -> None:
    assert {c.verb for c in COMMANDS} == set(VERBS)
    names = {c.name for c in COMMANDS}
    assert {"qwen-npu patches verify", "qwen-npu fetch wait", "qwen-npu fetch verify"} <= names
    flags = {o.flag for o in OPTIONS}
    assert {"--concurrency", "--tp", "--port", "--output", "--config", "--ca-bundle"} <= flags
    assert len(NUMBER_CASES) >= 100 and len(PATH_CASES) >= 40


#: An option that writes: its name says out/output (--out, --output, --render-rules' FILE is typed).
OUTPUT_NAME = re.compile(r"^--(out|output)(-dir|-file)?$|-(out|output)$")


@inside
def test_every_output_option_is_checked_by_the_parser() -> None:
    unchecked = [
        o.id
        for o in OPTIONS
        if o.flag and OUTPUT_NAME.search(o.flag) and not isinstance(o.action.type, OutputPath)
    ]
    assert not unchecked, (
        f"options that write without a cli_parser.output_file/output_dir type=: {unchecked}"
    )


@inside
def test_every_number_option_is_range_checked_by_the_parser() -> None:
    untyped = [o.id for o in OPTIONS if numeric_without_number(o.action)]
    assert not untyped, (
        f"options that take a number without a cli_parser.Number type= (positive_int, port, "
        f"fraction...): {untyped}"
    )


# -- a closed stdout and Ctrl-C: subprocesses ----------------------------------------------------


def _cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "qwen_npu", *argv]


@inside
def test_a_closed_stdout_is_quiet_and_exits_141(sandbox: Path) -> None:
    """Every command's --help (what every verb prints) and ``qwen-npu --help`` into a pipe whose
    reader is already gone: exit 141 (128 + SIGPIPE), nothing on stderr."""
    commands = [["--help"]] + [[c.verb, *c.words, "--help"] for c in COMMANDS]
    running = []
    for argv in commands:
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the verb writes a byte
        proc = subprocess.Popen(
            _cli(*argv), stdout=write, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=REPO
        )
        os.close(write)
        running.append((argv, proc))
    for argv, proc in running:
        _, err = proc.communicate(timeout=120)
        assert (proc.returncode, err.decode()) == (EXIT_BROKEN_PIPE, ""), argv


@inside
def test_no_stdout_at_all_is_quiet(sandbox: Path) -> None:
    """Started with stdout closed (``>&-``): what it prints goes nowhere, exit 0, stderr empty."""
    running = [
        (argv, subprocess.Popen(
            _cli(*argv), stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=REPO,
            preexec_fn=lambda: os.close(1),
        ))
        for argv in [["--help"]] + [[c.verb, *c.words, "--help"] for c in COMMANDS]
    ]  # fmt: skip
    for argv, proc in running:
        _, err = proc.communicate(timeout=120)
        assert (proc.returncode, err.decode()) == (0, ""), argv


@inside
def test_ctrl_c_is_one_line_and_exit_130(sandbox: Path) -> None:
    """``qwen-npu fetch wait`` on a DEST no fetch has filled yet waits; Ctrl-C ends it with one
    line and 130, whatever it was doing."""
    proc = subprocess.Popen(
        _cli("fetch", "wait", str(sandbox / "dest"), "--source", "hf://org/model",
             "--timeout", "600", "--log-every", "1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=REPO,
        env=os.environ | REMOTES,
    )  # fmt: skip
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the wait's first progress line: it is waiting now
    assert first, "fetch wait ended before it waited"
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=30)
    err = first.decode() + rest.decode()
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    said = [line for line in err.splitlines() if line.startswith("qwen-npu fetch")]
    assert len(said) == 1 and "interrupted" in said[0], err


# -- the namespace ---------------------------------------------------------------------------------


def _namespace() -> list[str]:
    if os.geteuid() == 0:
        return ["unshare", "--net"]
    return ["unshare", "--net", "--map-root-user"]


@pytest.mark.skipif(INSIDE, reason="this is the outer run")
def test_the_suite_in_a_network_namespace() -> None:
    """This file again, in a network namespace with only loopback up (no route anywhere else),
    every remote at a closed local port; the inner run's summary is the result."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.fail("unshare and ip (util-linux, iproute2) are needed: make tools installs them")
    started = time.monotonic()
    inner = (
        f"ip link set lo up && exec {sys.executable} -m pytest {__file__} -q -p no:cacheprovider "
        "-p no:randomly -n 0 -o addopts='' --timeout 600"
    )
    done = subprocess.run(
        [*_namespace(), "sh", "-c", inner],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=os.environ | {NETNS: "1"},
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
    assert done.returncode == 0, tail
    summary = done.stdout.strip().splitlines()[-1]
    skipped = re.search(r"(\d+) skipped", summary)
    assert re.search(r"\d+ passed", summary), tail
    assert "failed" not in summary and "error" not in summary, tail
    assert skipped is None or skipped.group(1) == "1", tail  # this test, inside
    print(f"{summary} (wall {time.monotonic() - started:.1f} s)")


def test_ids_are_unique() -> None:  # a duplicate id would hide a case in pytest's report
    ids: Callable[[list[Case]], list[str]] = lambda cases: [c.id for c in cases]  # noqa: E731
    for cases in (NUMBER_CASES, PATH_CASES):
        assert len(set(ids(cases))) == len(ids(cases))
