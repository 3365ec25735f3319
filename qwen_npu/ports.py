"""Whether a server can listen on (host, port), asked before uvicorn starts.

Why it exists: uvicorn runs the app's startup (our "ready" log, the sidecar's start line) before it
binds, and on a port in use it exits the process with code 3 after several log lines. The sim and
the sidecar ask here first, so a busy port is one line naming the port and the fix.
"""

from __future__ import annotations

import socket


def cannot_listen(host: str, port: int) -> str | None:
    """None when (host, port) can be bound now (SO_REUSEADDR, as uvicorn binds), else the reason."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return f"cannot resolve host {host!r} ({exc})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None
