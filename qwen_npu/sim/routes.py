"""The simulator's routes besides generate: SGLang's probes (/health, /health_generate, /ready) and
information (model, server, models, /metrics), and its own /sim/faults, /sim/stats and /sim/config.

/health generates one token and answers 200 once the engine emitted anything after the probe
arrived (503 after ``health-check-timeout-s``, which marks the server unhealthy); while starting
or draining both health routes answer 503 at once, as SGLang 0.5.23 does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from qwen_npu import __version__
from qwen_npu._pins import SGLANG_VERSION
from qwen_npu.log import PartLog
from qwen_npu.sim import protocol as proto
from qwen_npu.sim.metrics import MALFORMED_EXPOSITION
from qwen_npu.sim.state import FaultError, Sim, crash

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SIMULATOR = f"qwen-npu sim {__version__}"

log = PartLog("sim")
router = APIRouter()


def sim_of(request: Request) -> Sim:
    sim: Sim = request.app.state.sim
    return sim


def bad_request(msg: str) -> JSONResponse:
    """SGLang's 400 answer with ``msg``."""
    return proto.error(msg, 400, "BadRequestError")


@router.get("/health")
@router.get("/health_generate")
async def health(request: Request) -> Response:
    sim = sim_of(request)
    if sim.draining:
        return Response(status_code=503)
    while sim.faults.hang_health:
        await sim.faults.next_change()
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


@router.get("/model_info")
@router.get("/get_model_info")
async def model_info(request: Request) -> dict[str, Any]:
    cfg = sim_of(request).cfg
    return {
        "model_path": cfg.model_path,
        "served_model_name": cfg.model_name,
        "tokenizer_path": cfg.model_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "load_format": "auto",
        "reasoning_parser": None,
        "tool_call_parser": None,
        "disaggregation_mode": "null",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": "qwen3_5_moe",
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "simulator": SIMULATOR,
    }


@router.get("/server_info")
@router.get("/get_server_info")
async def server_info(request: Request) -> dict[str, Any]:
    sim = sim_of(request)
    cfg = sim.cfg
    eng = sim.eng
    tput, acc_len, _ = eng.window_stats()
    state: dict[str, Any] = {
        "last_gen_throughput": tput,
        "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": cfg.max_total_tokens},
    }
    if eng.spec:
        state["avg_spec_accept_length"] = acc_len
    spec = cfg.speculative_algorithm if eng.spec else None
    return {
        "model_path": cfg.model_path,
        "served_model_name": cfg.model_name,
        "tp_size": cfg.tp_size,
        "device": "npu",
        "quantization": "modelslim",
        "max_running_requests": cfg.max_running_requests,
        "context_length": cfg.context_length,
        "enable_metrics": True,
        "speculative_algorithm": spec,
        "speculative_num_steps": cfg.speculative_num_steps if spec else None,
        "speculative_eagle_topk": cfg.speculative_eagle_topk if spec else None,
        "speculative_num_draft_tokens": cfg.speculative_num_draft_tokens if spec else None,
        "max_total_num_tokens": cfg.max_total_tokens,
        "startup_time": sim.started_wall,
        "internal_states": [state],
        "version": SGLANG_VERSION,  # the release whose surface it speaks: the pinned one
        "frontend": "python",
        "simulator": SIMULATOR,
    }


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    sim = sim_of(request)
    cfg = sim.cfg
    card = {
        "id": cfg.model_name,
        "object": "model",
        "created": int(sim.started_wall),
        "owned_by": "sglang",
        "root": cfg.model_name,
        "max_model_len": cfg.context_length,
    }
    return {"object": "list", "data": [card]}


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    sim = sim_of(request)
    delay = sim.faults.metrics_delay_s
    if delay:
        await asyncio.sleep(delay)
    malformed = sim.faults.metrics_malformed
    body = MALFORMED_EXPOSITION if malformed else sim.metrics.render(sim.eng.gauges())
    return Response(body, media_type=PROMETHEUS_CONTENT_TYPE)


@router.get("/sim/faults")
async def get_faults(request: Request) -> dict[str, Any]:
    return sim_of(request).faults.model_dump()


@router.patch("/sim/faults")
async def patch_faults(request: Request) -> Response:
    sim = sim_of(request)
    try:
        changes = sim.faults.parse_patch(proto.loads(await request.body()))
    except (FaultError, proto.BadRequest) as exc:
        return bad_request(str(exc))
    sim.faults.apply(changes)
    log("warning", "faults_changed", changes=changes, now=sim.faults.model_dump())
    if "hang_generate" in changes:
        if changes["hang_generate"]:
            sim.eng.pause()
        else:
            sim.eng.resume()
    if changes.get("crash"):
        asyncio.get_running_loop().call_later(0.05, crash, "PATCH /sim/faults crash=true")
        return JSONResponse({**sim.faults.model_dump(), "crash": True}, status_code=202)
    return JSONResponse(sim.faults.model_dump())


@router.get("/sim/stats")
async def get_stats(request: Request) -> dict[str, Any]:
    """The engine's timing figures and the request counts (arrived, before ready, draining)."""
    sim = sim_of(request)
    return {**sim.eng.timing_stats(), **sim.arrivals, "requests_in_flight": sim.in_flight}


@router.get("/sim/config")
async def get_config(request: Request) -> dict[str, Any]:
    return sim_of(request).cfg.model_dump(mode="json", by_alias=True)
