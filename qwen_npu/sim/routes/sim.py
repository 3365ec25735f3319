"""The simulator's own surface (not SGLang's): GET/PATCH /sim/faults, /sim/stats, /sim/config."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from qwen_npu.log import PartLog
from qwen_npu.sim import protocol as proto
from qwen_npu.sim.faults import FaultError
from qwen_npu.sim.routes import bad_request, sim_of
from qwen_npu.sim.state import crash

log = PartLog("sim")
router = APIRouter()


@router.get("/sim/faults")
async def get_faults(request: Request) -> dict[str, Any]:
    return sim_of(request).faults.as_dict()


@router.patch("/sim/faults")
async def patch_faults(request: Request) -> Response:
    sim = sim_of(request)
    try:
        changes = sim.faults.parse_patch(proto.loads(await request.body()))
    except (FaultError, proto.BadRequest) as exc:
        return bad_request(str(exc))
    sim.faults.apply(changes)
    log("warning", "faults_changed", changes=changes, now=sim.faults.as_dict())
    if "hang_generate" in changes:
        if changes["hang_generate"]:
            sim.eng.pause()
        else:
            sim.eng.resume()
    if changes.get("crash"):
        asyncio.get_running_loop().call_later(0.05, crash, "PATCH /sim/faults crash=true")
        return JSONResponse({**sim.faults.as_dict(), "crash": True}, status_code=202)
    return JSONResponse(sim.faults.as_dict())


@router.get("/sim/stats")
async def get_stats(request: Request) -> dict[str, Any]:
    """The engine's timing figures and the request counts (arrived, before ready, draining)."""
    sim = sim_of(request)
    return {**sim.eng.timing_stats(), **sim.counts()}


@router.get("/sim/config")
async def get_config(request: Request) -> dict[str, Any]:
    return sim_of(request).cfg.model_dump(mode="json", by_alias=True)
