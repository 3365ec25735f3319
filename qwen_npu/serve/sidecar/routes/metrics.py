"""``/metrics``: prometheus_client's own ASGI app over the sidecar's private registry.

Why this exists: the exposition format (and gzip) is prometheus_client's job, not ours. The thin
wrapper only brings the clock-driven gauges (startup elapsed, uptime) up to the moment of the
scrape before handing the request over. It is an ASGI class so Starlette routes ``/metrics``
exactly, without a redirect to ``/metrics/``.
"""

from __future__ import annotations

from prometheus_client import make_asgi_app
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from qwen_npu.serve.sidecar.monitor import Monitor


class MetricsEndpoint:
    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor
        self.app = make_asgi_app(registry=monitor.registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.monitor.refresh_time()
        await self.app(scope, receive, send)


def route(monitor: Monitor) -> Route:
    return Route("/metrics", endpoint=MetricsEndpoint(monitor), methods=["GET"])
