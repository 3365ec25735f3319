"""What every ``qwen-npu <verb>`` parses with: one-line errors, checked numbers, checked paths.

Every error, the parser's included, is one line ``qwen-npu <verb>: error: <message>``, a bad
value is refused before anything runs, and ``run_verb`` turns what a verb did not catch into such
a line. The exit codes are here (docs/cli.md: the table). Stdlib only (the engine imports it).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import select
import sys
import tempfile
import traceback
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

#: The exit codes every verb shares (docs/cli.md): one meaning each across the package.
EXIT_FAILED = 1  # the check's verdict is no, the run failed, or a target did not answer
EXIT_BAD_INPUT = 2  # a flag, file or value the user gave is wrong: the message names it
EXIT_NO_SPACE = 3  # no space left where the verb writes
EXIT_TIMED_OUT = 4  # a wait ran out of time
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_BROKEN_PIPE = 141  # stdout closed by the reader (128 + SIGPIPE, as a shell reports it)


def error_line(prog: str, message: str) -> str:
    return f"{prog}: error: {message}"


def fail(prog: str, message: str, code: int = EXIT_BAD_INPUT) -> int:
    print(error_line(prog, message), file=sys.stderr, flush=True)
    return code


class OneLineParser(argparse.ArgumentParser):
    """Errors as ``<prog>: error: <message>; see: <prog> --help``, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, error_line(self.prog, f"{message}; see: {self.prog} --help\n"))

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        """As argparse's, without swallowing a write error: a closed stdout under ``--help`` is
        the edge's (exit 141), not a silent exit 0."""
        if message:
            (file or sys.stderr).write(message)


@dataclass(frozen=True)
class Number:
    """An argparse ``type=``: a finite int or float within bounds, else a one-line refusal
    (``accepts`` also tells the bad-input suite which of 0, -1, inf, nan to see refused)."""

    kind: type[int] | type[float]
    low: float | None = None
    low_open: bool = False
    high: float | None = None
    what: str = "a number"
    passes: tuple[str, ...] = ()  # words handed on as text (an optional setting's "none")

    def accepts(self, value: float) -> bool:
        if not math.isfinite(value) or (self.kind is int and value != int(value)):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or value <= self.high

    def __call__(self, text: str) -> int | float | str:
        if text.strip().lower() in self.passes:
            return text
        try:
            value = self.kind(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {self.what}") from None
        if not self.accepts(value):
            raise argparse.ArgumentTypeError(f"{text} is not {self.what}")
        return value


positive_int = Number(int, low=1, what="an integer of 1 or more")
non_negative_int = Number(int, low=0, what="an integer of 0 or more")
positive_float = Number(float, low=0, low_open=True, what="a finite number above 0")
non_negative_float = Number(float, low=0, what="a finite number of 0 or more")
port = Number(int, low=1, high=65535, what="a TCP port (1-65535)")
fraction = Number(float, low=0, low_open=True, high=1, what="a fraction above 0 and at most 1")
unit_interval = Number(float, low=0, high=1, what="a number from 0 to 1")


def float_between(low: float, high: float, low_open: bool = False) -> Number:
    what = f"a number {'above' if low_open else 'from'} {low} to {high}"
    return Number(float, low=low, low_open=low_open, high=high, what=what)


@dataclass(frozen=True)
class OutputPath:
    """An argparse ``type=`` for where a verb writes, checked before a long run rather than at its
    last write: the nearest existing folder on the way must be one this process can write in."""

    folder: bool
    what: str

    def __call__(self, text: str) -> Path:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"an empty path is not {self.what}")
        path = Path(text)
        if self.folder and path.exists() and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a file, not a folder; pass a folder")
        if not self.folder and path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a folder; pass a file path in it")
        nearest = path.absolute().parent
        while not nearest.exists() and nearest != nearest.parent:
            nearest = nearest.parent
        if not nearest.is_dir():
            why = f"{nearest} is a file, not a folder; pass a path under a folder"
            raise argparse.ArgumentTypeError(f"{text}: {why}")
        # a real write, not os.access (which asks for the real uid, not the one that writes):
        # an existing file opened for append (unchanged), else a nameless file in the folder
        try:
            if path.exists() and not path.is_dir():
                path.open("ab").close()
            else:
                tempfile.TemporaryFile(dir=path if path.is_dir() else nearest).close()
        except OSError as exc:
            why = f"cannot write there ({exc.strerror}); pass a path you can write"
            raise argparse.ArgumentTypeError(f"{text}: {why}") from None
        return path


output_file = OutputPath(folder=False, what="a file to write")
output_dir = OutputPath(folder=True, what="a folder to write in")


# The edge: what a verb did not catch becomes one line naming the file or flag and the fix.


def _flag_for(path: str, argv: Sequence[str]) -> str | None:
    """``--flag value`` (or ``value``) of the argument naming ``path`` or a folder above it."""
    target = os.path.abspath(path)
    for i, arg in enumerate(argv):
        flag, value = arg.split("=", 1) if arg.startswith("--") and "=" in arg else (None, arg)
        if not value or value.startswith("-"):
            continue
        given = os.path.abspath(value)
        if target == given or target.startswith(given.rstrip(os.sep) + os.sep):
            if flag is None and i > 0 and argv[i - 1].startswith("-"):
                flag = argv[i - 1]
            return f"{flag} {value}" if flag else value
    return None


def _file_in_traceback(exc: BaseException) -> str | None:
    """The innermost existing file a frame of the traceback held: the file a decoder was reading
    when it failed, which its exception does not name."""
    for frame, _ in reversed(list(traceback.walk_tb(exc.__traceback__))):
        for value in frame.f_locals.values():
            if isinstance(value, Path) or (
                isinstance(value, str) and 0 < len(value) < 4096 and os.sep in value
            ):
                try:
                    if os.path.isfile(value):
                        return str(value)
                except (OSError, ValueError):
                    continue
    return None


def _where(path: str | None, argv: Sequence[str]) -> str:
    if path is None:
        return "a file it read"
    given = _flag_for(path, argv)
    if given is None:
        return path
    return given if given.endswith(path) else f"{given}: {path}"


_PATH_ERRORS = {
    "ENOENT": "no such file or folder; check the path",
    "EISDIR": "is a folder; pass a file",
    "ENOTDIR": "a part of the path is a file, not a folder; fix the path",
    "EACCES": "permission denied; make it readable (or writable) for this user, or pass another",
    "EPERM": "not permitted; make it readable (or writable) for this user, or pass another",
    "EROFS": "on a read-only file system; pass a path on a writable one",
    "ENOSPC": "no space left on the device; free some or pass a path on another",
    "EDQUOT": "over the disk quota; free some or pass a path on another",
    "ENAMETOOLONG": "the name is too long; pass a shorter path",
    "ELOOP": "too many symbolic links; fix the path",
    "EIO": "an I/O error reading it; check the disk, or pass another copy",
}


def describe(exc: BaseException, argv: Sequence[str]) -> tuple[str, int] | None:
    """(one line, exit code) for an exception of the edge's kinds; None for any other."""
    # lazy: only an error loads ssl; bench's locust must patch ssl before anything imports it
    import ssl

    yaml = sys.modules.get("yaml")  # never imported here: only a verb that read YAML has it
    said = None
    if yaml is not None and isinstance(exc, yaml.YAMLError):
        mark = getattr(exc, "problem_mark", None)
        name = getattr(mark, "name", None)
        path = name if name and not name.startswith("<") else _file_in_traceback(exc)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        said = f"{_where(path, argv)}: not valid YAML ({problem}{at}); fix the file"
    elif isinstance(exc, json.JSONDecodeError):
        at = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        said = f"{_where(_file_in_traceback(exc), argv)}: not valid JSON ({at}); fix the file"
    elif isinstance(exc, UnicodeDecodeError):
        at = f"not UTF-8 text ({exc.reason} at byte {exc.start})"
        said = f"{_where(_file_in_traceback(exc), argv)}: {at}; pass a UTF-8 text file"
    elif isinstance(exc, UnicodeError):
        said = f"cannot encode a text ({exc}); run under a UTF-8 locale (LANG=C.UTF-8)"
    elif isinstance(exc, ssl.SSLError):
        bundles = [a for a in argv if a.split("=")[0] in ("--ca-bundle", "--cacert", "--ca")]
        given = f" with {bundles[0]}" if bundles else ""
        said = (
            f"TLS failed{given} ({exc.reason or exc.strerror or exc}); pass a PEM bundle holding "
            "the server's CA (--ca-bundle FILE: one or more -----BEGIN CERTIFICATE----- blocks)"
        )
    if said is not None or not isinstance(exc, OSError):
        return None if said is None else (said, EXIT_BAD_INPUT)
    code = errno.errorcode.get(exc.errno or 0, "")
    why = _PATH_ERRORS.get(code, exc.strerror or str(exc))
    exit_code = EXIT_NO_SPACE if code in ("ENOSPC", "EDQUOT") else EXIT_BAD_INPUT
    if exc.filename is not None:
        return f"{_where(os.fsdecode(exc.filename), argv)}: {why}", exit_code
    cause = getattr(exc, "reason", None)  # urllib's URLError
    if isinstance(exc, ConnectionError | TimeoutError) or cause is not None:
        why = f"cannot reach the target ({cause or exc.strerror or exc})"
        return f"{why}; check the URL and that it is up", EXIT_FAILED
    return f"{exc.strerror or exc}", exit_code


def run_verb(prog: str, entry: Callable[[list[str]], int | None], argv: list[str]) -> int:
    """Run a verb's ``main(argv)`` at the CLI's edge: a closed stdout is quiet (141), Ctrl-C one
    line (130), an error ``describe`` knows one line naming the file or flag and the fix, anything
    else one line calling it a bug (1; its traceback with ``QWEN_NPU_TRACEBACK=1``)."""
    if sys.stdout is None:  # started with stdout closed (>&-): what it prints goes nowhere
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  # the process's stdout from now on
    try:
        try:
            return int(entry(argv) or 0)
        finally:  # here, not at the interpreter's exit (--help's SystemExit included)
            sys.stdout.flush()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError as exc:
        try:  # is stdout a pipe whose reader has gone? (a captured one has no fileno: it is)
            poll = select.poll()
            poll.register(sys.stdout.fileno(), select.POLLOUT)
            closed = any(event & select.POLLERR for _, event in poll.poll(0))
        except (AttributeError, OSError, ValueError):
            closed = True
        if closed:  # stdout to /dev/null: the interpreter's last flush must not fail again
            with contextlib.suppress(AttributeError, OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_BROKEN_PIPE
        return fail(prog, f"a connection closed under it ({exc}); try again", EXIT_FAILED)
    except Exception as exc:
        said = describe(exc, argv)
        if said is not None:
            return fail(prog, said[0], said[1])
        if os.environ.get("QWEN_NPU_TRACEBACK") == "1":
            raise
        return fail(
            prog,
            f"unexpected {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; "
            f"a bug in {prog}: report it with the command line (QWEN_NPU_TRACEBACK=1 shows "
            "where)",
            EXIT_FAILED,
        )


def field_number(field: object, none_words: tuple[str, ...] = ()) -> Number | None:
    """The ``Number`` for a pydantic int or float field (``Optional`` too; ``none_words`` pass as
    text), its bounds from ``ge``/``gt``/``le``; None for another type. Duck-typed: no pydantic
    import here."""
    annotation = getattr(field, "annotation", None)
    kinds = [a for a in (typing.get_args(annotation) or (annotation,)) if a is not type(None)]
    if len(kinds) != 1 or kinds[0] not in (int, float):
        return None
    kind = kinds[0]
    metadata = getattr(field, "metadata", [])
    found = [(k, getattr(m, k, None)) for m in metadata for k in ("ge", "gt", "le")]
    limits = {k: v for k, v in found if v is not None}
    low, low_open, high = limits.get("gt", limits.get("ge")), "gt" in limits, limits.get("le")
    bounds = [f"{'above' if low_open else 'at least'} {low:g}"] if low is not None else []
    bounds += [f"at most {high:g}"] if high is not None else []
    what = "an integer" if kind is int else "a finite number"
    what += " " + " and ".join(bounds) if bounds else ""
    return Number(kind, low=low, low_open=low_open, high=high, what=what, passes=none_words)


@dataclass(frozen=True)
class InputPath:
    """An argparse ``type=`` for a file or folder a verb reads and can (a real open, not
    os.access, which asks for the real uid)."""

    folder: bool

    def __call__(self, text: str) -> Path:
        path = Path(text)
        kind = "folder" if self.folder else "file"
        try:
            if self.folder:
                os.listdir(path)
            elif path.is_dir():
                raise argparse.ArgumentTypeError(f"{text} is a folder; pass a file")
            else:
                path.open("rb").close()
        except NotADirectoryError:
            why = f"not a folder (or a part of the path is a file); pass a {kind}"
        except FileNotFoundError:
            why = f"no such {kind}; check the path"
        except OSError as exc:
            why = f"cannot read it ({exc.strerror}); make it readable or pass another"
        else:
            return path
        raise argparse.ArgumentTypeError(f"{text}: {why}")


input_file = InputPath(folder=False)
input_dir = InputPath(folder=True)
