"""The port numbers, once (the chart keeps its own values), and ``cannot_listen``: uvicorn runs the
app's startup before it binds and exits 3 after several lines on a busy port, so the sim and the
sidecar ask here first and say it in one line naming the port and the fix.
"""

from __future__ import annotations

import socket
from typing import Final

#: SGLang's HTTP port (``--port``): the engine's API and /metrics; the simulator's; the router's.
ENGINE_PORT: Final = 30000
#: The sidecar's port (/livez, /readyz, /startupz, /status, /metrics).
SIDECAR_PORT: Final = 9400
#: The engine on this machine, as clients reach it by default.
LOCAL_ENGINE_URL: Final = f"http://127.0.0.1:{ENGINE_PORT}"


def cannot_listen(host: str, port: int) -> str | None:
    """None when (host, port) can be bound now (as uvicorn binds), else the reason."""
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
