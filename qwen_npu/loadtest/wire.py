"""A kept-alive HTTP/1.1 connection that streams a response's lines with the least work per token.

Why not ``requests`` here: docs/architecture.md (about 100 µs of client CPU per token, which a
loaded client reports as TTFT). One ``recv`` takes whatever has arrived, the chunked framing is
undone over that buffer, and the request bytes are built once per row and sent with one
``sendall``. Each bench user owns one session, opened before the measured phase (``warm``).
Plain ``http://`` only; sockets are gevent's after locust's monkey-patching.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

RECV_BYTES = 65536
REQUEST_TIMEOUT_S = 600.0


class StreamBroken(ConnectionError):
    """The connection ended before the response did."""


class WireSession:
    """One kept-alive connection to ``base_url``'s host and port."""

    def __init__(self, base_url: str, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{base_url}: WireSession speaks plain http:// only")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.host_header = parts.netloc
        self.timeout_s = timeout_s
        self.sock: socket.socket | None = None
        self._heads: dict[str, bytes] = {}

    def connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        return sock

    def warm(self, path: str = "/v1/models") -> WireSession:
        """Open the connection now (before the clock runs) with one small GET; errors ignored."""
        try:
            for _ in self.send(self.request_bytes("GET", path))[1]:
                pass
        except OSError:
            self.close()
        return self

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    def request_bytes(self, method: str, path: str, body: bytes = b"") -> bytes:
        head = self._heads.get(path)
        if head is None:
            head = self._heads[path] = (
                f"{method} {path} HTTP/1.1\r\nHost: {self.host_header}\r\n"
                "Accept: */*\r\nContent-Type: application/json\r\nContent-Length: "
            ).encode()
        return head + str(len(body)).encode() + b"\r\n\r\n" + body

    def send(self, data: bytes) -> tuple[int, Iterator[bytes]]:
        """Send a prepared request; (status, the body's lines as they arrive).

        A kept-alive connection the server closed meanwhile is reopened once, when nothing of the
        response had arrived yet. The line iterator must be consumed to the end (or ``close()``
        called) before the next request.
        """
        for attempt in (0, 1):
            sock = self.sock or self.connect()
            try:
                sock.sendall(data)
                reader = _Reader(sock)
                status, headers = reader.head()
                return status, self._body(reader, headers)
            except (StreamBroken, ConnectionResetError, BrokenPipeError) as exc:
                self.close()
                # A reset or a close before any byte of the response: a stale connection.
                if attempt or not getattr(exc, "before_response", True):
                    raise
        raise AssertionError("unreachable")

    def _body(self, reader: _Reader, headers: dict[bytes, bytes]) -> Iterator[bytes]:
        keep = headers.get(b"connection", b"").lower() != b"close"
        try:
            if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
                yield from reader.chunked_lines()
            elif b"content-length" in headers:
                yield from reader.sized_lines(int(headers[b"content-length"]))
            else:
                keep = False
                yield from reader.lines_to_eof()
        except BaseException:
            self.close()
            raise
        if not keep:
            self.close()


class _Reader:
    """Parses one response from a socket: status line, headers, then the body's lines."""

    __slots__ = ("buf", "got_any", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.got_any = False

    def _more(self) -> bytes:
        data = self.sock.recv(RECV_BYTES)
        if not data:
            exc = StreamBroken("the server closed the connection")
            exc.before_response = not self.got_any  # type: ignore[attr-defined]
            raise exc
        self.got_any = True
        return data

    def head(self) -> tuple[int, dict[bytes, bytes]]:
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._more()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        first, *rest = head.split(b"\r\n")
        parts = first.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise StreamBroken(f"not an HTTP response: {first[:60]!r}")
        headers: dict[bytes, bytes] = {}
        for line in rest:
            k, _, v = line.partition(b":")
            headers[k.strip().lower()] = v.strip()
        return int(parts[1]), headers

    def chunked_lines(self) -> Iterator[bytes]:
        """Lines of a chunked body, each yielded as soon as its bytes are in."""
        buf, pending = self.buf, b""
        while True:
            # One chunk: "<hex size>\r\n<data>\r\n"; size 0 ends the body.
            while (i := buf.find(b"\r\n")) < 0:
                buf += self._more()
            size = int(buf[:i].split(b";", 1)[0], 16)
            if size == 0:  # then optional trailers and an empty line
                rest = buf[i + 2 :]
                while not rest.startswith(b"\r\n") and b"\r\n\r\n" not in rest:
                    rest += self._more()
                if pending:
                    yield pending
                return
            end = i + 2 + size
            while len(buf) < end + 2:
                buf += self._more()
            data, buf = buf[i + 2 : end], buf[end + 2 :]
            if pending:
                data = pending + data
            lines = data.split(b"\n")
            pending = lines.pop()
            yield from filter(None, lines)  # SSE's blank separator lines carry nothing

    def sized_lines(self, length: int) -> Iterator[bytes]:
        buf = self.buf
        while len(buf) < length:
            buf += self._more()
        yield from buf[:length].split(b"\n")

    def lines_to_eof(self) -> Iterator[bytes]:
        buf = self.buf
        while True:
            try:
                buf += self._more()
            except StreamBroken:
                break
        yield from buf.split(b"\n")
