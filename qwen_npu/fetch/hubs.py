"""Hugging Face and ModelScope through their own clients (``huggingface_hub``, ``modelscope``).

The clients' metadata calls give the commit and every file's size and sum, and honour their mirror
settings, tokens, proxies and CA bundles; the bytes come from the URL the client builds, read one
bounded chunk at a time (``_Hub.stream``), so the transfer keeps control of memory, timeouts,
retries and resume. Both clients are imported only here (``qwen-npu[fetch]``).
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from qwen_npu.cli_parser import EXIT_BAD_INPUT
from qwen_npu.fetch.source import (
    CHUNK,
    GIT_SHA1,
    SHA256,
    SIZE_ONLY,
    FetchError,
    Listing,
    RemoteFile,
    Source,
    Stream,
    TransientError,
    credential_origin,
    safe_relpath,
)

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
FIX_TOKEN = "put a valid read token there and re-run (docs/runbook.md 'Rotating credentials')"


def _auth_error(source: Source, status: int, env: str) -> FetchError:
    origin = credential_origin(env)
    if os.environ.get(env):
        why = f"the hub refused the token in {origin} (HTTP {status})"
    else:
        why = f"the hub wants a token (HTTP {status}) and {origin} is empty"
    return FetchError(f"{source}: {why}; {FIX_TOKEN}", EXIT_BAD_INPUT)


def _status_error(source: Source, status: int, what: str, env: str) -> Exception:
    if status in (401, 403):
        return _auth_error(source, status, env)
    if status in RETRY_STATUS:
        return TransientError(f"{what}: HTTP {status}")
    return FetchError(f"{source}: {what}: HTTP {status}; check SOURCE and the mirror setting")


class _Hub:
    TOKEN_ENV = ""

    def __init__(self, source: Source, read_timeout: float, connect_timeout: float) -> None:
        self.source = source
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self.token = os.environ.get(self.TOKEN_ENV) or None
        self._session: Any = None

    def _no_repo(self, endpoint: str) -> FetchError:
        return FetchError(
            f"{self.source}: no repository {self.source.repo!r} at {endpoint} (or it is private "
            f"and {credential_origin(self.TOKEN_ENV)} has no access); check the name",
            EXIT_BAD_INPUT,
        )

    @contextmanager
    def stream(self, url: str, headers: dict[str, str], what: str, offset: int) -> Iterator[Stream]:
        """The file's bytes from ``offset``, 1 MiB at a time, through one requests session.

        requests/urllib3 rather than httpx: a third of the CPU on a large file (make perf-fetch);
        both honour HTTPS_PROXY, NO_PROXY and the CA bundle, and requests drops Authorization when
        a mirror redirects to another host.
        """
        # lazy: an extra's (pyproject.toml); the base install goes without
        import requests
        from urllib3.exceptions import HTTPError

        if self._session is None:
            self._session = requests.Session()
        headers = {**headers, "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        errors = (requests.RequestException, HTTPError, OSError)
        try:
            resp = self._session.get(
                url,
                headers=headers,
                stream=True,
                timeout=(self.connect_timeout, self.read_timeout),
                allow_redirects=True,
            )
        except errors as exc:
            raise TransientError(f"{what}: {type(exc).__name__}: {exc}") from None
        try:
            # Where the bytes begin (a server may ignore the range); None: an error status.
            start = {206: offset, 200: 0, 416: None if offset else 0}.get(resp.status_code)
            if start is None:
                raise _status_error(self.source, resp.status_code, what, self.TOKEN_ENV)
            yield Stream(start, _guard(resp.raw.stream(CHUNK, decode_content=False), errors))
        finally:
            resp.close()


class HuggingFace(_Hub):
    """``hf://org/name[@revision]``."""

    TOKEN_ENV = "HF_TOKEN"

    def __init__(self, source: Source, read_timeout: float, connect_timeout: float) -> None:
        super().__init__(source, read_timeout, connect_timeout)
        self.endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")

    def resolve(self) -> Listing:
        # lazy: an extra's (pyproject.toml); the base install goes without
        import httpx
        from huggingface_hub import HfApi
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        api = HfApi(endpoint=self.endpoint, token=self.token)
        rev = self.source.revision or "main"
        try:
            info = api.model_info(
                self.source.repo, revision=rev, files_metadata=True, timeout=self.read_timeout
            )
        except RevisionNotFoundError:
            raise FetchError(
                f"{self.source}: {self.endpoint} has no revision {rev!r}; name a branch, tag or "
                "commit id that exists",
                EXIT_BAD_INPUT,
            ) from None
        except GatedRepoError:
            raise _auth_error(self.source, 403, self.TOKEN_ENV) from None
        except RepositoryNotFoundError as exc:
            status = exc.response.status_code if exc.response is not None else 404
            if status == 401 and self.token:
                raise _auth_error(self.source, status, self.TOKEN_ENV) from None
            raise self._no_repo(self.endpoint) from None
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else 0
            raise _status_error(self.source, status, "model info", self.TOKEN_ENV) from None
        except httpx.TransportError as exc:
            raise TransientError(f"model info: {type(exc).__name__}: {exc}") from None
        if not info.sha or info.siblings is None:
            raise FetchError(f"{self.source}: {self.endpoint} sent no commit id or file list")
        files = []
        for s in info.siblings:
            path = safe_relpath(s.rfilename)
            if s.lfs is not None:
                files.append(RemoteFile(path, s.lfs.size, SHA256, s.lfs.sha256))
            elif s.size is not None and s.blob_id:
                files.append(RemoteFile(path, s.size, GIT_SHA1, s.blob_id))
            else:
                raise FetchError(f"{self.source}: {path}: the hub published no size or blob id")
        return Listing(self.source, info.sha, files)

    @contextmanager
    def open(self, listing: Listing, f: RemoteFile, offset: int) -> Iterator[Stream]:
        # lazy: an extra's (pyproject.toml); the base install goes without
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

        url = hf_hub_url(
            self.source.repo, f.path, revision=listing.revision, endpoint=self.endpoint
        )
        with self.stream(url, dict(build_hf_headers(token=self.token)), f.path, offset) as s:
            yield s


class ModelScope(_Hub):
    """``modelscope://org/name[@revision]``."""

    TOKEN_ENV = "MODELSCOPE_API_TOKEN"
    _api: Any = None

    @property
    def api(self) -> Any:
        if self._api is None:
            with warnings.catch_warnings():  # MODELSCOPE_DOMAIN is "deprecated" but honoured
                warnings.simplefilter("ignore", FutureWarning)
                # lazy: an extra's (pyproject.toml); the base install goes without
                from modelscope_hub import HubApi, HubConfig

                # A fresh config reads MODELSCOPE_ENDPOINT / MODELSCOPE_DOMAIN now (the client's
                # default config is read once per process).
                self._api = HubApi(config=HubConfig(token=self.token))
        return self._api

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        # lazy: an extra's (pyproject.toml); the base install goes without
        from modelscope_hub.errors import (
            AuthenticationError,
            NetworkError,
            NotExistError,
            PermissionDeniedError,
            RateLimitError,
            ServerError,
        )

        try:
            return fn(*args, **kwargs)
        except (AuthenticationError, PermissionDeniedError) as exc:
            status = 401 if isinstance(exc, AuthenticationError) else 403
            raise _auth_error(self.source, status, self.TOKEN_ENV) from None
        except NotExistError:
            raise self._no_repo(self.api.legacy.endpoint) from None
        except (NetworkError, ServerError, RateLimitError) as exc:
            raise TransientError(f"{what}: {type(exc).__name__}: {exc}") from None

    def resolve(self) -> Listing:
        legacy = self.api.legacy
        rev = self.source.revision or "master"
        commit = rev if _COMMIT.match(rev) else ""
        if not commit:
            branches, tags = self._call(
                "revisions", legacy.list_revisions_detail, self.source.repo, "model"
            )
            detail = next((d for d in [*tags, *branches] if d.get("Revision") == rev), None)
            if detail is None:
                known = ", ".join(str(d.get("Revision")) for d in [*branches, *tags])
                raise FetchError(
                    f"{self.source}: {legacy.endpoint} has no revision {rev!r} (it has: {known})",
                    EXIT_BAD_INPUT,
                )
            commit = str(detail.get("CommitId") or detail.get("CommitID") or "")
        entries = self._call(
            "file list", legacy.list_repo_files, self.source.repo, "model", revision=commit or rev
        )
        files = []
        for e in entries:
            if (e.get("Type") or "blob") == "tree":
                continue
            path = safe_relpath(str(e.get("Path") or ""))
            sha = str(e.get("Sha256") or "")
            check = SHA256 if sha else SIZE_ONLY
            files.append(RemoteFile(path, int(e.get("Size") or 0), check, sha))
        if not commit:  # no commit id published: the contents name the revision
            digest = hashlib.sha256()
            for rf in sorted(files, key=lambda x: x.path):
                digest.update(f"{rf.path}\0{rf.size}\0{rf.expected}\n".encode())
            commit = f"{rev}-{digest.hexdigest()[:16]}"
        return Listing(self.source, commit, files)

    @contextmanager
    def open(self, listing: Listing, f: RemoteFile, offset: int) -> Iterator[Stream]:
        legacy = self.api.legacy
        rev = listing.revision
        if not _COMMIT.match(rev):
            rev = self.source.revision or "master"
        url = legacy.get_download_url(self.source.repo, "model", f.path, rev)
        headers = {"User-Agent": "qwen-npu-fetch"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
            headers["Cookie"] = f"m_session_id={self.token}"
        with self.stream(url, headers, f.path, offset) as s:
            yield s


def _guard(
    chunks: Iterator[bytes], errors: type[BaseException] | tuple[type[BaseException], ...]
) -> Iterator[bytes]:
    try:
        yield from chunks
    except errors as exc:
        raise TransientError(f"read: {type(exc).__name__}: {exc}") from None
