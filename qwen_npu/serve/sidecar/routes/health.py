"""The kubelet's three probes: ``/startupz``, ``/readyz``, ``/livez``.

Why this exists: each answers from the monitor's cached state in well under a millisecond of work,
200 when the check passes and 503 when it fails, with a small JSON body that says why. The
semantics are in ``qwen_npu.serve.sidecar.health`` and docs/sidecar.md.
"""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from qwen_npu.serve.sidecar.deps import MonitorDep
from qwen_npu.serve.sidecar.health import Verdict

router = APIRouter(tags=["probes"])


def _answer(verdict: Verdict) -> JSONResponse:
    return JSONResponse(asdict(verdict), status_code=200 if verdict.ok else 503)


@router.get("/startupz")
async def startupz(monitor: MonitorDep) -> JSONResponse:
    return _answer(monitor.health.startup(monitor.clock()))


@router.get("/readyz")
async def readyz(monitor: MonitorDep) -> JSONResponse:
    return _answer(monitor.health.readiness(monitor.clock()))


@router.get("/livez")
async def livez(monitor: MonitorDep) -> JSONResponse:
    return _answer(monitor.health.liveness(monitor.clock()))
