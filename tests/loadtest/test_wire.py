"""The bench's wire client: chunked framing however the bytes arrive, keep-alive, errors.

A scripted TCP server sends exact bytes (split into pieces as small as one byte, with pauses), so
the parser meets chunk headers, SSE lines and the final chunk cut at every position.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from qwen_npu.loadtest.wire import StreamBroken, WireSession

EVENTS = [b'data: {"text":"a","meta_info":{"completion_tokens":1}}', b"data: [DONE]"]


def chunked(*payloads: bytes) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads)
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + body
        + b"0\r\n\r\n"
    )


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return b""
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    while len(body) < length:
        body += conn.recv(65536)
    return head


Script = Callable[[socket.socket, int], bool]  # (connection, request number) -> keep open?


@pytest.fixture()
def server() -> Iterator[Callable[[Script], str]]:
    socks: list[socket.socket] = []

    def start(script: Script) -> str:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        socks.append(srv)

        def serve() -> None:
            n = 0
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                with conn:
                    while _read_request(conn):
                        keep = script(conn, n)
                        n += 1
                        if not keep:
                            break

        threading.Thread(target=serve, daemon=True).start()
        return f"http://127.0.0.1:{srv.getsockname()[1]}"

    yield start
    for s in socks:
        s.close()


def test_lines_survive_any_split_of_the_bytes(server: Callable[[Script], str]) -> None:
    payload = chunked(EVENTS[0] + b"\n\n", EVENTS[1] + b"\n\n")

    def dribble(conn: socket.socket, n: int) -> bool:
        step = 1 if n == 0 else 7
        for i in range(0, len(payload), step):
            conn.sendall(payload[i : i + step])
            if i % 50 == 0:
                time.sleep(0.001)
        return True

    session = WireSession(server(dribble))
    for _ in range(2):  # the second request reuses the connection
        status, lines = session.send(session.request_bytes("POST", "/generate", b"{}"))
        assert status == 200
        assert [x for x in lines if x] == EVENTS
    session.close()


def test_an_event_split_over_two_chunks_is_one_line(server: Callable[[Script], str]) -> None:
    first, second = EVENTS[0][:20], EVENTS[0][20:] + b"\n\n"

    def two_chunks(conn: socket.socket, n: int) -> bool:
        conn.sendall(chunked(first, second))
        return True

    session = WireSession(server(two_chunks))
    status, lines = session.send(session.request_bytes("POST", "/generate", b"{}"))
    assert status == 200 and [x for x in lines if x] == [EVENTS[0]]


def test_a_connection_the_server_closed_is_reopened(server: Callable[[Script], str]) -> None:
    def once_per_connection(conn: socket.socket, n: int) -> bool:
        conn.sendall(chunked(EVENTS[0] + b"\n\n"))
        return False  # close after each response, without saying so

    session = WireSession(server(once_per_connection))
    for _ in range(3):
        status, lines = session.send(session.request_bytes("POST", "/generate", b"{}"))
        assert status == 200 and [x for x in lines if x] == [EVENTS[0]]


def test_an_error_status_and_its_body(server: Callable[[Script], str]) -> None:
    def error(conn: socket.socket, n: int) -> bool:
        body = b'{"error":"overloaded"}'
        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s" % (
            len(body), body))  # fmt: skip
        return True

    session = WireSession(server(error))
    status, lines = session.send(session.request_bytes("GET", "/x"))
    assert status == 503 and list(lines) == [b'{"error":"overloaded"}']


def test_a_stream_cut_mid_body_is_broken(server: Callable[[Script], str]) -> None:
    def cut(conn: socket.socket, n: int) -> bool:
        conn.sendall(chunked(EVENTS[0] + b"\n\n")[:-20])
        return False

    session = WireSession(server(cut))
    status, lines = session.send(session.request_bytes("POST", "/generate", b"{}"))
    assert status == 200
    with pytest.raises(StreamBroken):
        list(lines)


def test_only_plain_http() -> None:
    with pytest.raises(ValueError, match="plain http"):
        WireSession("https://example.invalid")
