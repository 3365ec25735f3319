"""The HTTP app: the kubelet's three probes, ``/status`` and ``/metrics``, over one monitor.

Every endpoint answers from the monitor's trackers and never waits for the engine; the monitor's
loops run inside the app's ``lifespan``, so importing this module starts nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from prometheus_client import make_asgi_app
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from qwen_npu import __version__
from qwen_npu.log import PartLog
from qwen_npu.patches.state import STATE_FILE
from qwen_npu.sidecar.collector import registry_for
from qwen_npu.sidecar.config import Settings
from qwen_npu.sidecar.health import Verdict
from qwen_npu.sidecar.info import finite
from qwen_npu.sidecar.monitor import Monitor

log = PartLog("sidecar")

#: The fields of one patch's state-file entry shown in /status, and how many patches at most.
_PATCH_FIELDS = ("state", "target", "detail", "used_by_mode", "pid", "updated_at")
_MAX_PATCHES = 32


def status_document(monitor: Monitor) -> dict[str, Any]:
    """Everything the sidecar knows, for the on-call engineer without PromQL (NaN as null)."""
    now = monitor.clock()
    h, info, canary, settings = monitor.health, monitor.info, monitor.canary, monitor.settings
    state = info.state
    state_dir = settings.state_dir
    draft_tokens = info.spec_number("speculative_num_draft_tokens")
    return {
        "probes": {
            "startup": asdict(h.startup(now)),
            "readiness": asdict(h.readiness(now)),
            "liveness": asdict(h.liveness(now)),
        },
        "engine": {
            "url": settings.engine_url,
            "up": h.up(),
            "ready": h.ready(),
            "draining": h.draining,
            "last_outcome": h.last_outcome,
            "last_status": h.last_status,
            "last_probe_age_s": (
                None if h.last_probe_at is None else round(now - h.last_probe_at, 3)
            ),
            "consecutive_failures": h.consecutive_failures,
            "consecutive_timeouts_or_refusals": h.consecutive_hard_failures,
            "startup_elapsed_s": round(h.startup_elapsed(now), 3),
            "startup_budget_s": settings.startup_budget_s,
            "uptime_s": round(h.uptime(now), 3),
            "restarts": h.restarts,
            "errors": dict(monitor.errors.counts),
        },
        "build": {"qwen_npu_version": __version__, "sglang_version": info.sglang_version()},
        "patches": {
            "state_file": None if state_dir is None else str(state_dir / STATE_FILE),
            "state_file_readable": state is not None,
            "states": info.patch_states(),
            "details": _patch_details(state),
            "gdn_contract": _gdn_details(state, info.gdn_verdicts()),
        },
        "ub": {
            "engine": (state or {}).get("ub_plan"),
            "predicted": monitor.predicted.plan,
            "predicted_error": monitor.predicted.error,
            "mismatch": info.ub_mismatch(monitor.ub_predicted),
        },
        "spec": {
            "enabled": info.spec_enabled(),
            "algorithm": info.spec_algorithm(),
            "num_steps": finite(info.spec_number("speculative_num_steps")),
            "num_draft_tokens": finite(draft_tokens),
            "server_info": info.server_info_view(),
        },
        "canary": {
            "enabled": settings.canary_enabled,
            "interval_s": settings.canary_interval_s,
            "golden": canary.golden is not None,
            "runs": dict(canary.runs),
            "last": canary.last,
            "last_success_ts": finite(canary.last_success_ts),
        },
        "settings": settings.public_dict(),
    }


def _patch_details(state: dict[str, Any] | None) -> dict[str, Any]:
    patches = state.get("patches") if state else None
    if not isinstance(patches, dict):
        return {}
    return {
        str(name): {key: entry.get(key) for key in _PATCH_FIELDS}
        for name, entry in list(patches.items())[:_MAX_PATCHES]
        if isinstance(entry, dict)
    }


def _gdn_details(state: dict[str, Any] | None, verdicts: dict[str, str]) -> dict[str, Any]:
    links = state.get("gdn_contract") if state else None
    entries = (
        {k: v for k, v in links.items() if isinstance(v, dict)} if isinstance(links, dict) else {}
    )
    return {
        link: {"verdict": verdict, "evidence": entries.get(link, {}).get("evidence")}
        for link, verdict in verdicts.items()
    }


def create_app(settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    monitor = Monitor(settings, transport=transport)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log("info", "sidecar_start", version=__version__, settings=settings.public_dict())
        await monitor.start()
        try:
            yield
        finally:
            await monitor.stop()
            log("info", "sidecar_stop")

    app = FastAPI(
        title="qwen-npu sidecar",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.monitor = monitor
    h = monitor.health
    for path, verdict in (
        ("/startupz", h.startup),
        ("/readyz", h.readiness),
        ("/livez", h.liveness),
    ):
        app.add_api_route(path, _probe(verdict, monitor.clock), methods=["GET"], tags=["probes"])

    async def status() -> dict[str, Any]:  # async: answered on the loop, as the probes are
        return status_document(monitor)

    app.add_api_route("/status", status, methods=["GET"])
    metrics = _AsgiEndpoint(make_asgi_app(registry=registry_for(monitor)))
    app.router.routes.append(Route("/metrics", endpoint=metrics, methods=["GET"]))
    return app


def _probe(verdict: Callable[[float], Verdict], clock: Callable[[], float]) -> Callable[[], Any]:
    """A probe route: 200 when the check passes, 503 when it fails, the verdict as the body."""

    async def answer() -> JSONResponse:
        found = verdict(clock())
        return JSONResponse(asdict(found), status_code=200 if found.ok else 503)

    return answer


class _AsgiEndpoint:
    """An ASGI app as a Route endpoint (Starlette wraps a function as a request handler, not an
    instance), so /metrics is served without Mount's redirect to /metrics/."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
