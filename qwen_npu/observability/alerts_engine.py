"""Engine liveness alerts: down, not ready, and a startup that outlives its budget.

All three read the sidecar's view of the engine (``qwen_npu_engine_*``), which keeps reporting
while the engine is loading or wedged. ``qwen_npu_engine_startup_elapsed_seconds`` grows until the
first ready and then freezes, so "it stopped changing" is how the rules tell a finished startup
from one in progress: a loading engine pages as StartupSlow, never as Down or NotReady.
"""

from __future__ import annotations

from qwen_npu.observability.rules import Alert, AlertGroup

_STARTED = "changes(qwen_npu_engine_startup_elapsed_seconds[5m]) == 0"

ENGINE_DOWN = Alert(
    name="QwenNpuEngineDown",
    severity="critical",
    for_="2m",
    summary="The SGLang engine does not answer its health endpoint.",
    description=(
        "The sidecar at {{ $labels.instance }} (pod {{ $labels.pod }}) has not reached the engine"
        " for 2 minutes after it had finished starting. Check the engine container's logs and"
        " restarts."
    ),
    expr=f"(qwen_npu_engine_up == 0) and ({_STARTED})",
)

ENGINE_NOT_READY = Alert(
    name="QwenNpuEngineNotReady",
    severity="warning",
    for_="5m",
    summary="The engine answers but is not ready to serve (and is not draining).",
    description=(
        "The engine behind {{ $labels.instance }} (pod {{ $labels.pod }}) has been up but not"
        " ready for 5 minutes after its startup finished; its health generation fails or hangs."
    ),
    expr=(
        "(qwen_npu_engine_ready == 0) and (qwen_npu_engine_up == 1)"
        f" and (qwen_npu_engine_draining == 0) and ({_STARTED})"
    ),
)

STARTUP_SLOW = Alert(
    name="QwenNpuStartupSlow",
    severity="warning",
    for_="1m",
    summary="The engine is taking longer than its startup budget to become ready.",
    description=(
        "The engine behind {{ $labels.instance }} (pod {{ $labels.pod }}) has been starting for"
        " {{ $value | humanizeDuration }}, over the budget of %(startupBudgetSeconds)s s, and is"
        " still not ready."
    ),
    expr=(
        "(qwen_npu_engine_startup_elapsed_seconds > %(startupBudgetSeconds)s)"
        " and on (instance, job) (qwen_npu_engine_ready == 0)"
    ),
    needs=("startupBudgetSeconds",),
)

GROUP = AlertGroup("qwen-npu.engine", (ENGINE_DOWN, ENGINE_NOT_READY, STARTUP_SLOW))
