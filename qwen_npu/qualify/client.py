"""One endpoint under qualification: greedy ``/generate`` calls and JSON GETs.

Built on the bench's own HTTP client (``qwen_npu.loadtest.wire.WireSession``: one kept-alive
connection, standard library only, so the sidecar image runs it too), with the engine's API key
added as a bearer header when the release has one. ``https://`` goes through urllib (the wire
client speaks plain http). Every failure comes back as ``EndpointError`` with one line.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from qwen_npu.loadtest.wire import WireSession

DEFAULT_TIMEOUT_S = 300.0


class EndpointError(RuntimeError):
    """The endpoint did not answer, or answered something that is not SGLang's shape."""


class _KeyedSession(WireSession):
    """The wire client with an ``Authorization: Bearer`` header on every request."""

    def __init__(self, base_url: str, api_key: str, timeout_s: float) -> None:
        super().__init__(base_url, timeout_s)
        self.api_key = api_key

    def request_bytes(self, method: str, path: str, body: bytes = b"") -> bytes:
        data = super().request_bytes(method, path, body)
        if not self.api_key:
            return data
        head, sep, rest = data.partition(b"\r\n")
        return head + sep + f"Authorization: Bearer {self.api_key}\r\n".encode() + rest


@dataclass(frozen=True)
class Answer:
    """A greedy generation: its text and, when the server returns them, its token ids."""

    text: str
    ids: tuple[int, ...] | None


class Endpoint:
    """A base URL (``http://host:port``) and how to call it."""

    def __init__(self, url: str, api_key: str = "", timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._session: _KeyedSession | None = None

    def _call(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.url.startswith("https://"):
            return self._call_urllib(method, path, body)
        if self._session is None:
            self._session = _KeyedSession(self.url, self.api_key, self.timeout_s)
        try:
            status, lines = self._session.send(self._session.request_bytes(method, path, body))
            return status, b"\n".join(lines)
        except (OSError, ValueError) as exc:
            self._session.close()
            raise EndpointError(f"{self.url}{path}: {type(exc).__name__}: {exc}") from None

    def _call_urllib(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + path, data=body or None, method=method)
        req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()
        except (OSError, ValueError) as exc:
            raise EndpointError(f"{self.url}{path}: {type(exc).__name__}: {exc}") from None

    def get_json(self, path: str) -> tuple[int, Any]:
        """(status, the decoded body or None)."""
        status, body = self._call("GET", path)
        try:
            return status, json.loads(body or b"null")
        except ValueError:
            return status, None

    def generate(self, text: str, max_new_tokens: int) -> Answer:
        """One greedy, non-streamed ``/generate`` (temperature 0)."""
        payload = {
            "text": text,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens},
        }
        status, body = self._call("POST", "/generate", json.dumps(payload).encode())
        if status != 200:
            raise EndpointError(f"{self.url}/generate answered HTTP {status}: {body[:120]!r}")
        try:
            out = json.loads(body)
        except ValueError:
            raise EndpointError(f"{self.url}/generate answered no JSON: {body[:120]!r}") from None
        if not isinstance(out, dict) or not isinstance(out.get("text"), str):
            raise EndpointError(f"{self.url}/generate answer has no string 'text'")
        ids = out.get("output_ids")
        if isinstance(ids, list) and all(isinstance(i, int) for i in ids):
            return Answer(out["text"], tuple(ids))
        return Answer(out["text"], None)

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
