"""``/status``: everything the sidecar knows as one JSON document, for humans and ``kubectl exec``.

Why this exists: during an incident the on-call engineer wants the probe verdicts, the patch
states, both UB plans, the spec-decode window and the last canary in one place, without PromQL.
The document itself is built by ``qwen_npu.serve.sidecar.status_view``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from qwen_npu.serve.sidecar.deps import MonitorDep
from qwen_npu.serve.sidecar.status_view import status_document

router = APIRouter(tags=["status"])


@router.get("/status")
async def status(monitor: MonitorDep) -> dict[str, Any]:
    return status_document(monitor)
