"""/health, /health_generate and /ready, as SGLang 0.5.23 answers them.

/health generates one token and answers 200 once the engine emitted anything after the probe
arrived (503 after ``health-check-timeout-s``, which marks the server unhealthy). While starting
or draining (after SIGTERM) both health routes answer 503 at once; /ready is 200 only when up and
not draining.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response

from qwen_npu.log import PartLog
from qwen_npu.sim import protocol as proto
from qwen_npu.sim.routes import sim_of

log = PartLog("sim")
router = APIRouter()


@router.get("/health")
@router.get("/health_generate")
async def health(request: Request) -> Response:
    sim = sim_of(request)
    if sim.draining:
        return Response(status_code=503)
    while sim.faults.hang_health:
        await sim.faults.changed.wait()
    if not sim.ready() or sim.draining:
        return Response(status_code=503)
    cfg = sim.cfg
    eng = sim.eng
    p = proto.GenParams([0], 1, True, False, "HEALTH_CHECK")
    req = sim.new_request(p, log_metrics=False)
    tic = eng.loop.time()
    eng.submit(req)
    try:
        end = tic + cfg.health_check_timeout_s
        while eng.loop.time() < end:
            await asyncio.sleep(min(cfg.health_check_poll_s, max(end - eng.loop.time(), 0)))
            if eng.last_emit > tic:
                sim.unhealthy = False
                return Response(status_code=200)
        sim.unhealthy = True
        log(
            "warning",
            "health_failed",
            what="no engine output within health-check-timeout-s",
            next="check the hang_generate fault or the queue",
        )
        return Response(status_code=503)
    finally:
        eng.abort(req)


@router.get("/ready")
async def ready(request: Request) -> Response:
    return Response(status_code=200 if sim_of(request).healthy() else 503)
