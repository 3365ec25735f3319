"""The simulator's routes, one APIRouter per concern.

generate (POST /generate and the OpenAI routes, also served by fastpath.RawSend), probes
(/health, /health_generate, /ready), info (model, server, models, /metrics) and sim (the
/sim/faults, /sim/stats and /sim/config surface that SGLang does not have). Routes find the shared
state as ``request.app.state.sim`` (``sim_of``).
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from qwen_npu.sim import protocol as proto
from qwen_npu.sim.state import Sim


def sim_of(request: Request) -> Sim:
    """The app's shared state."""
    sim: Sim = request.app.state.sim
    return sim


def bad_request(msg: str) -> JSONResponse:
    """SGLang's 400 answer with ``msg``."""
    return JSONResponse(proto.error_body(msg, 400, "BadRequestError"), status_code=400)
