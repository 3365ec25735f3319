"""SOURCE (``modelscope://``, ``hf://``, ``s3://``, ``obs://``), what every source gives the
fetch, and the fetch's failures.

The CLI, the chart and the init container's wait name a checkpoint the same way, parsed once. A
``Remote`` (hubs.py, objects.py) turns its client's answers into a ``Listing`` at an immutable
revision, and its errors into ``FetchError`` (one line and an exit code: act on it) or
``TransientError`` (try again). A refused token is named by its chart Secret and key
(``QWEN_NPU_FETCH_SECRET``, ``QWEN_NPU_FETCH_SECRET_KEYS``), not as a bare variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

# The codes every verb shares (qwen_npu.cli_parser, docs/cli.md): 1 the transfer or verification
# failed after every retry; 2 bad SOURCE, DEST, flag, repo, revision or credentials; 3 DEST cannot
# hold the checkpoint; 4 `fetch wait` or the lock wait ran out of time.
from qwen_npu.cli_parser import EXIT_BAD_INPUT, EXIT_FAILED


class FetchError(Exception):
    """A failure the user can act on; ``str()`` is the one line."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class TransientError(Exception):
    """A read that may work when tried again (connection cut, timeout, 5xx, 429)."""


HUBS = ("modelscope", "hf")
STORES = ("s3", "obs")
SCHEMES = HUBS + STORES
# The variables each scheme's client reads (the first is the token of a hub).
CREDENTIAL_ENV: dict[str, tuple[str, ...]] = {
    "hf": ("HF_TOKEN",),
    "modelscope": ("MODELSCOPE_API_TOKEN",),
    "s3": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    "obs": ("OBS_ACCESS_KEY_ID", "OBS_SECRET_ACCESS_KEY"),
}
ENV_SECRET = "QWEN_NPU_FETCH_SECRET"
ENV_SECRET_KEYS = "QWEN_NPU_FETCH_SECRET_KEYS"
# The chart mounts the Secret as files here (not as environment variables: checkov CKV_K8S_35).
ENV_CREDENTIALS_DIR = "QWEN_NPU_FETCH_CREDENTIALS_DIR"

_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$")
EXAMPLES = (
    "modelscope://org/name[@revision], hf://org/name[@revision], s3://bucket/prefix, "
    "obs://bucket/prefix"
)


@dataclass(frozen=True)
class Source:
    """A parsed SOURCE. ``repo`` is ``org/name`` (hubs) or the bucket (stores)."""

    scheme: str
    repo: str
    prefix: str = ""
    revision: str | None = None

    @property
    def location(self) -> str:
        """The SOURCE without its revision."""
        tail = f"/{self.prefix}" if self.prefix else ""
        return f"{self.scheme}://{self.repo}{tail}"

    def __str__(self) -> str:
        return self.location + (f"@{self.revision}" if self.revision else "")


def _bad(text: str, why: str) -> FetchError:
    return FetchError(f"SOURCE {text!r}: {why}; expected one of {EXAMPLES}", EXIT_BAD_INPUT)


def parse_source(text: str, revision: str | None = None) -> Source:
    """Parse SOURCE; ``revision`` (the ``--revision`` flag) overrides an ``@revision`` suffix."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise _bad(text, "no scheme")
    if scheme not in SCHEMES:
        raise _bad(text, f"unknown scheme {scheme!r}")
    if scheme in HUBS:
        repo, _, suffix = rest.partition("@")
        repo = repo.strip("/")
        if not _REPO.match(repo):
            raise _bad(text, f"{repo!r} is not org/name")
        rev = revision or suffix or None
        if rev is not None and not _REVISION.match(rev):
            raise _bad(text, f"revision {rev!r} is not a branch, tag or commit id")
        return Source(scheme, repo, "", rev)
    if "@" in rest or revision:
        raise _bad(text, "object stores take no @revision (the objects' ETags are the revision)")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise _bad(text, f"{bucket!r} is not a bucket name")
    return Source(scheme, bucket, prefix.strip("/"), None)


def _secret_keys() -> dict[str, str]:
    pairs = os.environ.get(ENV_SECRET_KEYS, "").split(",")
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def load_credentials() -> None:
    """Set each ``VAR=key`` of QWEN_NPU_FETCH_SECRET_KEYS from the mounted Secret's file ``key``
    (a missing key leaves its variable unset, so the client's refusal names it)."""
    directory = os.environ.get(ENV_CREDENTIALS_DIR, "")
    if not directory:
        return
    for name, key in _secret_keys().items():
        path = os.path.join(directory, key)
        if os.path.isfile(path):
            with open(path) as f:
                os.environ[name] = f.read().strip()


def credential_origin(name: str) -> str:
    """How to name variable ``name`` in an error: with its Secret and key when the chart set it."""
    secret, keys = os.environ.get(ENV_SECRET, ""), _secret_keys()
    return f"{name} (Secret {secret!r}, key {keys[name]!r})" if secret and name in keys else name


CHUNK = 1 << 20  # bytes per read: the fetch's memory does not grow with the file
# How a file is checked against what the source publishes.
SHA256 = "sha256"  # the hubs' LFS and ModelScope's file listing
GIT_SHA1 = "git-sha1"  # Hugging Face's blob id of a small (non-LFS) file
MD5 = "md5"  # an object store's ETag of a single-part upload
MULTIPART = "s3-multipart"  # an ETag "<md5 of the parts' md5s>-<parts>"
SIZE_ONLY = "size"  # the source published no sum (logged; ModelScope's small files)


@dataclass(frozen=True)
class RemoteFile:
    """One file of the checkpoint as the source publishes it."""

    path: str
    size: int
    check: str
    expected: str
    part_size: int = 0  # MULTIPART only
    version: str = ""  # the object's VersionId or ETag (stores): the read asks for this one


@dataclass
class Listing:
    """The checkpoint at one immutable revision."""

    source: Source
    revision: str  # immutable: a commit id, or a digest of the objects' ETags/versions
    files: list[RemoteFile] = field(default_factory=list)

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


@dataclass
class Stream:
    """An open read: ``start`` is where the bytes begin (0 when the server ignored the range)."""

    start: int
    chunks: Iterator[bytes]


class Remote(Protocol):
    source: Source

    def resolve(self) -> Listing: ...

    def open(
        self, listing: Listing, f: RemoteFile, offset: int
    ) -> AbstractContextManager[Stream]: ...


def safe_relpath(path: str) -> str:
    """A listing's path, refused when it would escape DEST (``..``, absolute, backslashes)."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        raise FetchError(f"the source lists an unsafe file name {path!r}; refusing to write it")
    return path
