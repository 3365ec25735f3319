"""A hub on 127.0.0.1 that speaks the endpoints the real clients call, with faults on demand.

Why this exists: the fetch tests run ``huggingface_hub`` and ``modelscope`` unmodified; they need a
server answering what those clients request (read from their installed source):

- Hugging Face: ``GET /api/models/{repo}/revision/{rev}?blobs=True`` (``HfApi.model_info``) and
  ``GET /{repo}/resolve/{commit}/{file}`` (``hf_hub_url``), with ``Range``;
- ModelScope: ``GET /api/v1/models/{repo}/revisions`` (branches and tags),
  ``GET /api/v1/models/{repo}/repo/files?Revision=&Recursive=`` (the file list with sha256) and
  ``GET /api/v1/models/{repo}/repo?Revision=&FilePath=`` (the bytes), with ``Range``.

Faults: a required token, a connection cut after N bytes, a flipped byte, a redirect to another
server (a mirror in front of a CDN), and a gate that holds a file half-sent until the test opens it.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import ssl
import threading
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


_SUMS: dict[Path, str] = {}


def _size(data: bytes | Path) -> int:
    return data.stat().st_size if isinstance(data, Path) else len(data)


def _sha256(data: bytes | Path) -> str:
    if isinstance(data, bytes):
        return hashlib.sha256(data).hexdigest()
    if data not in _SUMS:
        h = hashlib.sha256()
        with data.open("rb") as f:
            while block := f.read(8 << 20):
                h.update(block)
        _SUMS[data] = h.hexdigest()
    return _SUMS[data]


@dataclass
class Repo:
    files: dict[str, bytes | Path]  # a Path is served from disk (the perf harness's big files)
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    branch: str = "main"
    lfs_above: int = 1024  # bigger files are LFS files on Hugging Face (sha256 published)


@dataclass
class Faults:
    token: str | None = None  # required Bearer token
    cut_after: dict[str, int] = field(default_factory=dict)  # file -> bytes sent before a cut
    cuts_left: Counter[str] = field(default_factory=Counter)
    corrupt: Counter[str] = field(default_factory=Counter)  # file -> times served with a bad byte
    redirect_to: str | None = None  # file reads answer 302 to this base URL
    gate: dict[str, threading.Event] = field(default_factory=dict)  # file -> opened by the test
    gate_reached: dict[str, threading.Event] = field(default_factory=dict)


class Hub:
    """One server; ``repos`` maps ``org/name`` to a Repo. Counts every file read in ``reads``."""

    def __init__(
        self, repos: dict[str, Repo] | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        self.repos = repos or {}
        self.faults = Faults()
        self.reads: Counter[str] = Counter()
        self.ranges: list[tuple[str, str | None]] = []
        self.auth_seen: list[str | None] = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hub._get(self)

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that hung up on a cut or a gate is expected here

        self.server = Server(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:  # HTTPS with a test CA's certificate (the --ca-bundle test)
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Hub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for gate in self.faults.gate.values():
            gate.set()
        self.server.shutdown()
        self.server.server_close()

    # ---- responses
    def _json(
        self,
        h: http.server.BaseHTTPRequestHandler,
        status: int,
        body: object,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _authorized(self, h: http.server.BaseHTTPRequestHandler) -> bool:
        auth = h.headers.get("Authorization")
        self.auth_seen.append(auth)
        if self.faults.token is None:
            return True
        return auth == f"Bearer {self.faults.token}"

    def _get(self, h: http.server.BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(h.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        if parts[:2] == ["api", "models"]:  # Hugging Face model_info
            return self._hf_info(h, parts[2:])
        if parts[:3] == ["api", "v1", "models"]:
            return self._ms(h, parts[3:], query)
        if len(parts) >= 5 and parts[2] == "resolve":  # Hugging Face file
            repo = self.repos.get(f"{parts[0]}/{parts[1]}")
            if repo is None or not self._authorized(h):
                return self._json(h, 401, {"error": "Invalid credentials"})
            return self._file(h, repo, "/".join(parts[4:]))
        if parts[:1] == ["cdn"]:  # the redirect target: no token needed (a signed URL)
            repo = self.repos.get(f"{parts[1]}/{parts[2]}")
            assert repo is not None
            return self._send(h, repo, "/".join(parts[3:]))
        self._json(h, 404, {"error": "no such endpoint"})

    def _hf_info(self, h: http.server.BaseHTTPRequestHandler, parts: list[str]) -> None:
        repo_id = "/".join(parts[:2])
        repo = self.repos.get(repo_id)
        if not self._authorized(h):
            return self._json(h, 401, {"error": "Invalid credentials in Authorization header"})
        if repo is None:
            return self._json(
                h, 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
            )
        rev = parts[3] if len(parts) > 3 else "main"
        if rev not in (repo.branch, repo.commit):
            return self._json(
                h, 404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"}
            )
        siblings = []
        for name, data in sorted(repo.files.items()):
            size = _size(data)
            s: dict[str, object] = {"rfilename": name, "size": size}
            if size > repo.lfs_above or isinstance(data, Path):
                s["lfs"] = {"size": size, "sha256": _sha256(data), "pointerSize": 134}
            else:
                s["blobId"] = git_blob_sha1(data)
            siblings.append(s)
        self._json(
            h,
            200,
            {
                "id": repo_id,
                "modelId": repo_id,
                "sha": repo.commit,
                "private": False,
                "siblings": siblings,
            },
        )

    def _ms(
        self, h: http.server.BaseHTTPRequestHandler, parts: list[str], query: dict[str, str]
    ) -> None:
        repo = self.repos.get("/".join(parts[:2]))
        if not self._authorized(h):
            return self._json(
                h, 401, {"Code": 10010401, "Message": "Unauthorized", "Success": False}
            )
        if repo is None:
            return self._json(
                h, 404, {"Code": 10010205, "Message": "model not found", "Success": False}
            )
        tail = parts[2:]
        if tail == ["revisions"]:
            branches = [{"Revision": "master", "CommitId": repo.commit, "CreatedAt": 1700000000}]
            tags = [{"Revision": "v1.0", "CommitId": repo.commit, "CreatedAt": 1700000000}]
            return self._json(
                h,
                200,
                {
                    "Code": 200,
                    "Success": True,
                    "Data": {"RevisionMap": {"Branches": branches, "Tags": tags}},
                },
            )
        if tail == ["repo", "files"]:
            if query.get("Revision") not in ("master", "v1.0", repo.commit):
                return self._json(h, 404, {"Code": 10010205, "Message": "revision not found"})
            files = [
                {
                    "Name": Path(n).name,
                    "Path": n,
                    "Size": _size(d),
                    "Type": "blob",
                    "Sha256": _sha256(d),
                    "Revision": repo.commit,
                }
                for n, d in sorted(repo.files.items())
            ]
            return self._json(h, 200, {"Code": 200, "Success": True, "Data": {"Files": files}})
        if tail == ["repo"]:
            return self._file(h, repo, query.get("FilePath", ""))
        self._json(h, 404, {"Code": 404, "Message": "no such endpoint"})

    def _file(self, h: http.server.BaseHTTPRequestHandler, repo: Repo, name: str) -> None:
        if name not in repo.files:
            return self._json(
                h, 404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"}
            )
        if self.faults.redirect_to:
            repo_id = next(k for k, v in self.repos.items() if v is repo)
            h.send_response(302)
            h.send_header("Location", f"{self.faults.redirect_to}/cdn/{repo_id}/{name}")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        self._send(h, repo, name)

    def _send(self, h: http.server.BaseHTTPRequestHandler, repo: Repo, name: str) -> None:
        data = repo.files[name]
        rng = h.headers.get("Range")
        self.reads[name] += 1
        self.ranges.append((name, rng))
        start = int(rng.removeprefix("bytes=").split("-")[0]) if rng else 0
        if isinstance(data, Path):
            return self._send_file(h, data, start, rng is not None)
        body = bytearray(data[start:])
        if self.faults.corrupt[name] > 0 and body:
            self.faults.corrupt[name] -= 1
            body[len(body) // 2] ^= 0xFF
        h.send_response(206 if rng else 200)
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Accept-Ranges", "bytes")
        if rng:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        cut = self.faults.cut_after.get(name)
        if cut is not None and self.faults.cuts_left[name] > 0:
            self.faults.cuts_left[name] -= 1
            h.wfile.write(bytes(body[:cut]))
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)  # the connection drops mid-file
            return
        gate = self.faults.gate.get(name)
        if gate is not None:
            half = len(body) // 2
            h.wfile.write(bytes(body[:half]))
            h.wfile.flush()
            self.faults.gate_reached.setdefault(name, threading.Event()).set()
            gate.wait(60)
            body = body[half:]
        h.wfile.write(bytes(body))

    def _send_file(
        self, h: http.server.BaseHTTPRequestHandler, path: Path, start: int, ranged: bool
    ) -> None:
        size = path.stat().st_size
        h.send_response(206 if ranged else 200)
        h.send_header("Content-Length", str(size - start))
        if ranged:
            h.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        h.end_headers()
        with path.open("rb") as f:
            h.connection.sendfile(f, offset=start)
