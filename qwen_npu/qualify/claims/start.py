"""The start claim: the engine came up the way its mode needs, from the evidence it leaves.

Sources, each optional (a missing one skips its checks, with the reason): the engine's ``/health``;
the sidecar's ``/status`` (``--sidecar URL``: readiness, the patch states and details it read from
the state file, the GDN contract, the UB plan used against the predicted one, the build); the
engine's state file itself (``--state-dir``, from the engine pod, qwen_npu.patches.state); the
engine's start-up log (``--engine-log FILE``: the entrypoint's ``event=driver_ok``,
``event=npu_devices_open`` and ``event=npu_ops_registered`` lines, and no
``event=gdn_decode.route_fallback``). Only a real engine on an NPU writes the state file and those
lines, so their checks are NPU-only: skipped against a simulator, failures under
``--require-npu``. Versions and image references (``--record KEY=VALUE``) go into the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qwen_npu import __version__
from qwen_npu.patches.fixes.gdn_decode_state_layout import COPY, IN_PLACE
from qwen_npu.patches.registry import GDN_CONTRACT, OK_STATES, PATCHES
from qwen_npu.patches.state import STATE_FILE, read_state
from qwen_npu.qualify.client import Endpoint, EndpointError
from qwen_npu.qualify.verdict import Check, Claim

DECODE_PATCH = "gdn-decode-state-layout"
#: The entrypoint's start-up lines only a node writes (docker/engine-entrypoint.sh,
#: qwen_npu/hardware/kernel_contents.py), and the decode fix's fallback event.
START_EVENTS = ("driver_ok", "npu_devices_open", "npu_ops_registered")
FALLBACK_EVENT = "gdn_decode.route_fallback"
NO_STATE = (
    "no engine state file: a simulator writes none; on the target pass --state-dir (the "
    "engine pod's QWEN_NPU_STATE_DIR) or --sidecar (its /status reads the file)"
)


def _get(endpoint: Endpoint, path: str) -> tuple[int, Any, str]:
    try:
        status, body = endpoint.get_json(path)
        return status, body, ""
    except EndpointError as exc:
        return 0, None, str(exc)


def _state_from_status(status: dict[str, Any]) -> dict[str, Any] | None:
    """The state file's patch and contract parts as /status shows them (None: not readable)."""
    patches = status.get("patches") or {}
    if not patches.get("state_file_readable"):
        return None
    return {
        "patches": patches.get("details") or {},
        "gdn_contract": patches.get("gdn_contract") or {},
        "ub_plan": (status.get("ub") or {}).get("engine"),
        "sglang_version": (status.get("build") or {}).get("sglang_version"),
    }


def patches_check(state: dict[str, Any] | None) -> Check:
    name = "patches applied"
    if state is None:
        return Check.skip(name, NO_STATE, npu_only=True)
    entries = state.get("patches") or {}
    bad, seen = [], []
    for info in PATCHES:
        entry = entries.get(info.name)
        if not isinstance(entry, dict):
            bad.append(f"{info.name}: no entry")
            continue
        st, used = entry.get("state"), entry.get("used_by_mode")
        seen.append(f"{info.name}={st}" + ("" if used is not False else " (not used by the mode)"))
        if st not in OK_STATES and used is not False:
            bad.append(f"{info.name}={st}: {entry.get('detail') or ''}"[:160])
    if bad:
        return Check.of(name, False, "; ".join(bad), npu_only=True)
    return Check.of(name, True, ", ".join(seen), npu_only=True)


def contract_check(state: dict[str, Any] | None) -> Check:
    name = "GDN state contract"
    if state is None:
        return Check.skip(name, NO_STATE, npu_only=True)
    links = state.get("gdn_contract") or {}
    if not links:
        return Check.skip(
            name,
            "absent from the state file: no engine process imported the GDN decode module "
            "yet (send a request, then run again)",
            npu_only=True,
        )
    verdicts = {
        link.name: (links.get(link.name) or {}).get("verdict", "unknown") for link in GDN_CONTRACT
    }
    failed = [f"{k}: {(links.get(k) or {}).get('evidence')}" for k, v in verdicts.items()
              if v == "fail"]  # fmt: skip
    text = ", ".join(f"{k}={v}" for k, v in verdicts.items())
    return Check.of(name, not failed, "; ".join(failed) if failed else text, npu_only=True)


def route_check(state: dict[str, Any] | None, log_text: str | None) -> Check:
    name = "decode route"
    if log_text is not None and f"event={FALLBACK_EVENT}" in log_text:
        line = next(x for x in log_text.splitlines() if f"event={FALLBACK_EVENT}" in x)
        return Check.of(name, False, f"the engine fell back to the copy route: {line[:200]}", True)
    if state is None:
        return Check.skip(name, NO_STATE, npu_only=True)
    detail = str(((state.get("patches") or {}).get(DECODE_PATCH) or {}).get("detail") or "")
    if f"route {IN_PLACE}" in detail:
        return Check.of(name, True, f"{IN_PLACE}, no {FALLBACK_EVENT}", npu_only=True)
    if f"route {COPY}" in detail:
        return Check.of(
            name,
            False,
            f"route {COPY}: a fallback (the engine log's event={FALLBACK_EVENT} says "
            f"why) or patches.gdnDecodeRoute={COPY}; the default is {IN_PLACE}",
            npu_only=True,
        )
    return Check.skip(name, f"{DECODE_PATCH}'s detail names no route: {detail[:120]!r}", True)


def ub_check(state: dict[str, Any] | None, status: dict[str, Any] | None) -> Check:
    name = "UB plan used = planned"
    if state is None:
        return Check.skip(name, NO_STATE, npu_only=True)
    used = state.get("ub_plan")
    if not isinstance(used, dict):
        return Check.skip(
            name, "ub_plan is null: the first MTP verify step computes it (send a request)", True
        )
    h = used.get("h_block_size")
    ub = (status or {}).get("ub") or {}
    predicted = ub.get("predicted")
    if not isinstance(predicted, dict):
        return Check.of(
            name,
            bool(used.get("fits", True)),
            f"used h_block_size {h} (no prediction to hold "
            "it against: pass --sidecar with the model folder mounted)",
            npu_only=True,
        )
    same = not ub.get("mismatch")
    return Check.of(
        name, same, f"used h_block_size {h}, planned {predicted.get('h_block_size')}", True
    )


def log_check(log_text: str | None, log_file: Path | None) -> Check:
    name = "driver, devices, ops"
    if log_text is None:
        return Check.skip(
            name, "no --engine-log FILE (the engine container's start-up log: kubectl logs)", True
        )
    found = {ev: next((x for x in log_text.splitlines() if f"event={ev}" in x), None)
             for ev in START_EVENTS}  # fmt: skip
    missing = [ev for ev, line in found.items() if line is None]
    if missing:
        return Check.of(
            name,
            False,
            f"{log_file}: no event={', event='.join(missing)} line (a log from "
            "before the model load, from the engine container)",
            npu_only=True,
        )
    return Check.of(name, True, " | ".join(str(x).strip()[:120] for x in found.values()), True)


def run(
    target: Endpoint,
    sidecar: Endpoint | None = None,
    state_dir: Path | None = None,
    engine_log: Path | None = None,
    records: dict[str, str] | None = None,
) -> Claim:
    """Gather the evidence and judge each part."""
    checks: list[Check] = []
    health, _, err = _get(target, "/health")
    checks.append(
        Check.of("engine answers", health == 200, err or f"{target.url}/health: HTTP {health}")
    )
    _, server_info, _ = _get(target, "/server_info")
    status: dict[str, Any] | None = None
    if sidecar is None:
        checks.append(Check.skip("sidecar ready", "no --sidecar URL (the sidecar's :9400)"))
    else:
        code, body, err = _get(sidecar, "/status")
        status = body if code == 200 and isinstance(body, dict) else None
        ready = ((status or {}).get("probes") or {}).get("readiness") or {}
        checks.append(
            Check.of(
                "sidecar ready",
                ready.get("status") == "ok",
                f"{sidecar.url}/status: "
                + (err or f"HTTP {code}" if status is None else f"readiness {ready.get('reason')}"),
            )
        )
    state = read_state(state_dir) if state_dir is not None else None
    if state is None and status is not None:
        state = _state_from_status(status)
    log_text = engine_log.read_text(encoding="utf-8", errors="replace") if engine_log else None
    checks += [
        patches_check(state),
        contract_check(state),
        route_check(state, log_text),
        ub_check(state, status),
        log_check(log_text, engine_log),
    ]
    versions = {
        "qwen_npu (this client)": __version__,
        "qwen_npu (sidecar)": ((status or {}).get("build") or {}).get("qwen_npu_version"),
        "sglang": (state or {}).get("sglang_version")
        or (server_info.get("version") if isinstance(server_info, dict) else None),
        **(records or {}),
    }
    data: dict[str, Any] = {
        "versions": {k: v for k, v in versions.items() if v},
        "state_source": (
            str(state_dir / STATE_FILE)
            if state_dir and read_state(state_dir)
            else ("sidecar /status" if state is not None else None)
        ),
        "server_info": server_info if isinstance(server_info, dict) else None,
    }
    bad = [c for c in checks if c.verdict == "fail"]
    summary = (
        bad[0].evidence
        if bad
        else "versions " + ", ".join(f"{k} {v}" for k, v in data["versions"].items())
    )
    return Claim("start", summary, checks, data)
