"""Shared test fixtures: the repository root, the versions file, and the test stand-ins' path.

tests/stubs/ holds stand-ins for packages that cannot run on a CPU machine (see its README). It is
appended to sys.path, so a real installation always wins.

A module whose own ``pytestmark`` already rules out every test it holds under ``-m`` (a module
marked ``sglang`` under make test-fast's "not sglang") is not imported at all: importing SGLang's
modules only to deselect every test costs each filtered run some 20 s of CPU.
"""

from __future__ import annotations

import ast
import itertools
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tools.paths import REPO, STUBS
from tools.versions import read_versions

if str(STUBS) not in sys.path:
    sys.path.append(str(STUBS))

# A run started in the background of a non-interactive shell (`make test &`, a CI runner's job)
# inherits SIGINT ignored, and so would every child a test starts: the tests that press Ctrl-C
# on a verb (the demo, fetch wait, the simulator) would wait on a process that cannot hear it.
# A handled signal is reset to the default on exec, an ignored one is not: handle it here.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


#: What a test may not leave changed for the next test in its worker: the CA bundles every HTTP
#: client of the process reads (a test CA left in REQUESTS_CA_BUNDLE made pip refuse PyPI later).
GUARDED_ENV = (
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "AWS_CA_BUNDLE",
)


@pytest.fixture(autouse=True)
def _no_leaked_trust() -> Iterator[None]:
    before = {name: os.environ.get(name) for name in GUARDED_ENV}
    yield
    after = {name: os.environ.get(name) for name in GUARDED_ENV}
    changed = {
        name: (before[name], after[name]) for name in GUARDED_ENV if before[name] != after[name]
    }
    assert not changed, f"the test left these changed (use monkeypatch.setenv): {changed}"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def versions() -> dict[str, str]:
    return read_versions()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A 127.0.0.1 port held by a listening socket for the test's duration."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield int(busy.getsockname()[1])


def make(
    repo: Path, env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``make <args>`` in ``repo`` as a user would (no outer make's flags), ``env`` added (a
    test's stand-ins first on PATH): the make targets' tests share it."""
    base = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(repo), *args],
        env=base | env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _module_marks(path: Path) -> set[str]:
    """The marker names of a test module's top-level ``pytestmark`` (read, not imported)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return {
                n.attr
                for n in ast.walk(node.value)
                if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Attribute)
                and n.value.attr == "mark"
            }
    return set()


def _marker_expression(expression: str) -> Callable[[set[str]], bool] | None:
    """``-m``'s expression (names with ``and``, ``or``, ``not``, parentheses: Python's own syntax
    for them) as a test of a set of marker names; None for anything else (collect as usual)."""
    try:
        tree = ast.parse(expression, mode="eval").body
    except SyntaxError:
        return None

    def value(node: ast.expr, names: set[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id in names
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not value(node.operand, names)
        if isinstance(node, ast.BoolOp):
            results = (value(v, names) for v in node.values)
            return all(results) if isinstance(node.op, ast.And) else any(results)
        raise ValueError(ast.dump(node))

    try:
        value(tree, set())
    except ValueError:
        return None
    return lambda names: value(tree, names)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip importing a module when no test in it can match ``-m``, whatever marks its tests add."""
    expression = config.getoption("markexpr")
    if (
        not expression
        or collection_path.suffix != ".py"
        or not collection_path.name.startswith("test_")
    ):
        return None
    marks = _module_marks(collection_path)
    if not marks:
        return None
    matches = _marker_expression(expression)
    if matches is None:
        return None
    # Only the marker names the expression mentions can change its value: the combinations of
    # those (plugins register a dozen more markers, 2^12 evaluations per module otherwise).
    named = set(re.findall(r"[A-Za-z_][\w]*", expression)) - {"and", "or", "not"}
    others = named - marks
    for extra in itertools.chain.from_iterable(
        itertools.combinations(sorted(others), k) for k in range(len(others) + 1)
    ):
        names = marks | set(extra)
        if matches(names):
            return None  # some test of the module could still match
    return True
