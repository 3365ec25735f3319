"""What the server says about itself: model and server info, the model list, /metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from qwen_npu import __version__
from qwen_npu._pins import SGLANG_VERSION
from qwen_npu.sim.metrics import MALFORMED_EXPOSITION
from qwen_npu.sim.routes import sim_of

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

router = APIRouter()


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
        "simulator": f"qwen-npu sim {__version__}",
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
        "simulator": f"qwen-npu sim {__version__}",
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
    if sim.faults.metrics_malformed:
        body = MALFORMED_EXPOSITION
    else:
        body = sim.metrics.render(sim.eng.gauges())
    return Response(body, media_type=PROMETHEUS_CONTENT_TYPE)
