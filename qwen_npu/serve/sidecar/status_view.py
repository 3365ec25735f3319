"""The ``/status`` document: everything the sidecar knows, as JSON-able values (NaN -> null).

Why this exists: during an incident the on-call engineer wants the probe verdicts, the patch
states, both UB plans, the spec-decode window and the last canary in one place, without PromQL.
This module only reads the monitor's state; the route (``routes/status.py``) serves it.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from qwen_npu.patches.state import STATE_FILE
from qwen_npu.serve.sidecar.info import finite

if TYPE_CHECKING:
    from qwen_npu.serve.sidecar.monitor import Monitor

#: The fields of one patch's state-file entry shown in /status, and how many patches at most.
_PATCH_FIELDS = ("state", "target", "detail", "pid", "updated_at")
_MAX_PATCHES = 32


def status_document(monitor: Monitor) -> dict[str, Any]:
    """The /status JSON of ``monitor`` at its clock's now."""
    now = monitor.clock()
    h, st, settings = monitor.health, monitor.stats, monitor.settings
    state = monitor.info.state
    state_dir = settings.state_dir
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
            "errors": dict(st.errors),
        },
        "build": {"qwen_npu_version": st.qwen_npu_version, "sglang_version": st.sglang_version},
        "patches": {
            "state_file": None if state_dir is None else str(state_dir / STATE_FILE),
            "state_file_readable": state is not None,
            "states": dict(st.patch_states),
            "details": _patch_details(state),
        },
        "ub": {
            "engine": (state or {}).get("ub_plan"),
            "predicted": monitor.predicted_plan,
            "predicted_error": monitor.predicted_error,
            "mismatch": st.ub_mismatch,
        },
        "spec": {
            "enabled": st.spec_enabled,
            "algorithm": st.spec_algorithm,
            "num_steps": finite(st.spec_num_steps),
            "num_draft_tokens": finite(st.spec_num_draft_tokens),
            "window_s": settings.spec_window_s,
            "window_covered_s": round(monitor.spec.span_s(), 3),
            "accept_length": finite(st.spec_accept_length),
            "accept_rate": finite(st.spec_accept_rate),
            "server_info": monitor.info.server_info,
        },
        "canary": {
            "enabled": settings.canary_enabled,
            "interval_s": settings.canary_interval_s,
            "golden": monitor.canary.golden is not None,
            "runs": dict(st.canary_runs),
            "last": monitor.canary.last,
            "last_success_ts": finite(st.canary_last_success_ts),
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
