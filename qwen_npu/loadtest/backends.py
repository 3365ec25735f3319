"""Request backends: how one dataset row becomes one streamed HTTP request, timed chunk by chunk.

``generate`` (SGLang's ``/generate`` with ``input_ids``, as ``sglang.benchmark.serving --backend
sglang --tokenize-prompt`` sends it) and ``openai`` (``/v1/completions``, the ids as the prompt).
Every chunk is stamped when it arrives; the timing rules are sglang.benchmark.serving's
(docs/loadtest.md). locust's FastHttpUser buffers streamed lines and is not used.
"""

from __future__ import annotations

import json
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from qwen_npu.loadtest.dataset import DatasetRow
from qwen_npu.loadtest.wire import REQUEST_TIMEOUT_S, StreamBroken, WireSession

if TYPE_CHECKING:  # requests is imported late: locust's gevent patching must come first
    import requests


@dataclass(frozen=True)
class RequestInput:
    base_url: str
    row: DatasetRow
    model: str = "default"
    index: int = 0


@dataclass
class RequestOutput:
    """What one request measured. Times are seconds; ``start_time`` is the wall clock."""

    index: int = 0
    success: bool = False
    prompt_len: int = 0
    output_len: int = 0
    start_time: float = 0.0
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    error: str = ""
    spec_verify_ct: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestOutput:
        return cls(**d)


def error_reason(exc: BaseException) -> str:
    """A short, countable reason for a failed request (the class, not the whole message)."""
    # lazy: an extra's (pyproject.toml); the base install goes without
    import requests

    if isinstance(exc, StreamBroken | requests.exceptions.ChunkedEncodingError):
        return "stream broken"
    if isinstance(exc, requests.exceptions.ConnectionError):
        return "connection error"
    if isinstance(exc, TimeoutError | requests.exceptions.Timeout):
        return "timeout"
    if isinstance(exc, ValueError):
        return "malformed chunk"
    if isinstance(exc, OSError):  # a socket error on the wire path
        return "connection error"
    return type(exc).__name__


class Backend(ABC):
    """The path, the payload, and how to read the streamed chunks."""

    path: str

    @abstractmethod
    def payload(self, inp: RequestInput) -> dict[str, Any]: ...

    @abstractmethod
    def read_stream(self, lines: Any, st: float, out: RequestOutput) -> None:
        """Consume the response's lines, filling ttft, itl, latency and output_len."""

    def __init__(self) -> None:
        self._bodies: dict[tuple[int, int], bytes] = {}
        self._wire: dict[tuple[int, int, int], bytes] = {}
        self._settings: dict[str, dict[str, Any]] = {}

    def body(self, inp: RequestInput) -> bytes:
        """The encoded JSON body, built once per (row, output length) and then reused."""
        key = (inp.index, inp.row.output_len)
        if key not in self._bodies:
            self._bodies[key] = json.dumps(self.payload(inp)).encode()
        return self._bodies[key]

    def request(self, session: requests.Session | WireSession, inp: RequestInput) -> RequestOutput:
        """Send one streamed request; never raises: failures come back with a reason.

        The request is fully prepared before the start stamp, so the timings hold the server and
        the wire, not the client's bookkeeping. A ``WireSession`` (plain http://, what the bench
        users hold) sends prepared bytes (wire.py); a ``requests.Session`` serves the rest.
        """
        out = RequestOutput(inp.index, prompt_len=inp.row.prompt_len, output_len=inp.row.output_len)
        try:
            if isinstance(session, WireSession):
                self._send_wire(session, inp, out)
            else:
                self._send_requests(session, inp, out)
        except Exception as exc:  # a flaky server must not end the run
            out.error = error_reason(exc)
        if out.ttft <= 0.0 and not out.error:
            out.error = "no token streamed"
        out.success = not out.error
        return out

    def _send_requests(
        self, session: requests.Session, inp: RequestInput, out: RequestOutput
    ) -> None:
        # lazy: an extra's (pyproject.toml); the base install goes without
        import requests

        url = inp.base_url.rstrip("/") + self.path
        headers = {"Content-Type": "application/json"}
        prepared = session.prepare_request(
            requests.Request("POST", url, data=self.body(inp), headers=headers)
        )
        settings = self._settings.get(url)
        if settings is None:  # proxies and TLS from the environment: once per URL
            settings = dict(session.merge_environment_settings(url, {}, True, None, None))
            settings["stream"] = True
            self._settings[url] = settings
        out.start_time = time.time()
        st = time.perf_counter()
        # requests.Session.send, not locust's HttpSession.request: no per-request bookkeeping
        # between the stamp and the wire (the locustfile reports to locust's stats itself).
        with requests.Session.send(
            session, prepared, timeout=REQUEST_TIMEOUT_S, **settings
        ) as resp:
            if resp.status_code != 200:
                out.error = f"HTTP {resp.status_code}"
                return
            self.read_stream(iter_lines(resp), st, out)

    def _send_wire(self, session: WireSession, inp: RequestInput, out: RequestOutput) -> None:
        key = (inp.index, inp.row.output_len, id(session))
        if key not in self._wire:
            self._wire[key] = session.request_bytes("POST", self.path, self.body(inp))
        out.start_time = time.time()
        st = time.perf_counter()
        try:
            status, lines = session.send(self._wire[key])
            if status != 200:
                for _ in lines:  # the error body, so the connection stays usable
                    pass
                out.error = f"HTTP {status}"
                return
            self.read_stream(lines, st, out)
        except BaseException:
            session.close()
            raise
        if out.error:
            session.close()  # the rest of the stream is not read


def iter_lines(resp: requests.Response) -> Iterator[bytes]:
    """Lines of a streamed response as their bytes arrive, from urllib3's raw stream (one item
    per HTTP chunk): fewer layers per token than ``Response.iter_lines``."""
    pending = b""
    for chunk in resp.raw.stream(None, decode_content=True):
        if pending:
            chunk = pending + chunk
        lines = chunk.split(b"\n")
        pending = lines.pop()
        yield from lines
    if pending:
        yield pending


def _sse_events(lines: Any, st: float, out: RequestOutput) -> Iterator[tuple[float, bytes]]:
    """(arrival time, payload) of each streamed event but ``[DONE]``; ``out.latency`` follows the
    last line that arrived (the terminator included), as sglang.benchmark.serving times it."""
    for line in lines:
        if not (line := line.strip()):
            continue
        data = line[6:] if line.startswith(b"data: ") else line
        now = time.perf_counter()
        out.latency = now - st
        if data != b"[DONE]":
            yield now, data


class GenerateBackend(Backend):
    """SGLang's native ``/generate``: cumulative text, ``meta_info.completion_tokens`` per chunk."""

    path = "/generate"

    def payload(self, inp: RequestInput) -> dict[str, Any]:
        return {
            "input_ids": inp.row.prompt,
            "sampling_params": {
                "temperature": 0.0,
                "max_new_tokens": inp.row.output_len,
                "ignore_eos": True,
            },
            "stream": True,
        }

    def read_stream(self, lines: Any, st: float, out: RequestOutput) -> None:
        last_ts = st
        last_len = 0
        for now, data in _sse_events(lines, st, out):
            fields = scan_generate_chunk(data)
            if fields is None:
                out.error = "server error in stream"
                return
            has_text, n, verify_ct = fields
            if verify_ct is not None:
                out.spec_verify_ct = verify_ct
            if not has_text:
                continue
            if n is None:
                n = last_len + 1
            if out.ttft == 0.0:
                out.ttft = now - st
            else:
                new = n - last_len
                if new == 0:
                    continue
                out.itl.extend([(now - last_ts) / new] * new)
            last_ts = now
            last_len = n
            out.output_len = n


_TEXT_KEY = b'{"text":"'
_DIGITS = re.compile(rb"\d+")
_COMPLETION_KEY = b'"completion_tokens":'
_VERIFY_KEY = b'"spec_verify_ct":'


def _int_after(data: bytes, key: bytes) -> int | None:
    """The integer that follows the last ``key`` in ``data`` (None when absent)."""
    i = data.rfind(key)
    if i < 0:
        return None
    m = _DIGITS.match(data, i + len(key))
    return int(m.group()) if m else None


def scan_generate_chunk(data: bytes) -> tuple[bool, int | None, int | None] | None:
    """(carries text, completion_tokens, spec_verify_ct) of one ``/generate`` chunk; None for an
    error object. Decoding the whole compact JSON per chunk (its cumulative text grows with every
    token) is most of a streaming client's CPU, so the fields are read by position; keys inside the
    text are escaped (``\\"``) and never match. Any other shape is decoded as JSON."""
    if data.startswith(_TEXT_KEY):
        has_text = not data.startswith(b'{"text":""')
        return has_text, _int_after(data, _COMPLETION_KEY), _int_after(data, _VERIFY_KEY)
    chunk = json.loads(data)
    if not isinstance(chunk, dict) or ("error" in chunk and "text" not in chunk):
        return None
    meta = chunk.get("meta_info") or {}
    verify = meta.get("spec_verify_ct")
    tokens = meta.get("completion_tokens")
    return (
        bool(chunk.get("text")),
        None if tokens is None else int(tokens),
        None if verify is None else int(verify),
    )


class OpenAIBackend(Backend):
    """``/v1/completions`` streamed: one inter-token gap per text chunk, length from ``usage``."""

    path = "/v1/completions"

    def payload(self, inp: RequestInput) -> dict[str, Any]:
        return {
            "model": inp.model,
            "prompt": inp.row.prompt,
            "max_tokens": inp.row.output_len,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }

    def read_stream(self, lines: Any, st: float, out: RequestOutput) -> None:
        last_ts = st
        for now, data in _sse_events(lines, st, out):
            chunk = json.loads(data)
            if "error" in chunk and "choices" not in chunk:
                out.error = "server error in stream"
                return
            usage = chunk.get("usage")
            if usage and usage.get("completion_tokens") is not None:
                out.output_len = int(usage["completion_tokens"])
            choices = chunk.get("choices") or []
            if not choices or not choices[0].get("text"):
                continue
            if out.ttft == 0.0:
                out.ttft = now - st
            else:
                out.itl.append(now - last_ts)
            last_ts = now


BACKEND_MAPPING: dict[str, type[Backend]] = {"generate": GenerateBackend, "openai": OpenAIBackend}
