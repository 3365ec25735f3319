"""Shared test fixtures: the repository root, the versions file, and the test stand-ins' path.

tests/stubs/ holds stand-ins for packages that cannot run on a CPU machine (see its README). It is
appended to sys.path, so a real installation always wins.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.versions import read_versions

REPO = Path(__file__).resolve().parent.parent
STUBS = REPO / "tests" / "stubs"

if str(STUBS) not in sys.path:
    sys.path.append(str(STUBS))


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
