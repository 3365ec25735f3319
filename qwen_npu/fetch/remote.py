"""What every source gives the fetch: a listing at an immutable revision and byte streams.

Why this exists: the hubs and the object stores differ in how they name a revision and what they
publish to verify a file (sha256, a git blob id, an MD5 ETag, a multipart ETag), but the transfer,
the manifest and the lock are the same for all of them. A ``Remote`` turns its client's answers
into a ``Listing`` and its client's errors into ``FetchError`` (act on it) or ``TransientError``
(try again).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from qwen_npu.fetch.errors import FetchError
from qwen_npu.fetch.source import Source

CHUNK = 1 << 20  # bytes per read: the fetch's memory does not grow with the file
# How a file is checked against what the source publishes.
SHA256 = "sha256"  # the hubs' LFS and ModelScope's file listing
GIT_SHA1 = "git-sha1"  # Hugging Face's blob id of a small (non-LFS) file
MD5 = "md5"  # an object store's ETag of a single-part upload
MULTIPART = "s3-multipart"  # an ETag "<md5 of the parts' md5s>-<parts>"
SIZE_ONLY = "size"  # the source published no sum (logged; ModelScope's small files)
CHECKS = (SHA256, GIT_SHA1, MD5, MULTIPART, SIZE_ONLY)


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

    def open(self, listing: Listing, f: RemoteFile, offset: int) -> AbstractContextManager[Stream]:
        """Read ``f`` from ``offset``; raises TransientError when a retry may help."""
        ...


def safe_relpath(path: str) -> str:
    """A listing's path, refused when it would escape DEST (``..``, absolute, backslashes)."""

    parts = path.split("/")
    if not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        raise FetchError(f"the source lists an unsafe file name {path!r}; refusing to write it")
    return path
