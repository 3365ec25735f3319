"""The port numbers, once, and whether a server can listen on (host, port) before uvicorn starts.

The numbers: SGLang's HTTP port (the engine, and the simulator standing in for it; the router's
in front of them) and the sidecar's. Every default in the package reads them from here; the chart
keeps its own values (its values.yaml is the deployment's source).

Why ``cannot_listen`` exists: uvicorn runs the app's startup (our "ready" log, the sidecar's start
line) before it binds, and on a port in use it exits the process with code 3 after several log
lines. The sim and the sidecar ask here first, so a busy port is one line naming the port and the
fix.
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
