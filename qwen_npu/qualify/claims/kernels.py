"""The kernels claim: the plain-decode GDN kernel of the in-place route, correct and (on an NPU)
timed, beside sgl-kernel-npu's kernel on a K-major copy (the copy route).

For each shape (Qwen3.6-35B-A3B at TP 2, Qwen3.5-397B-A17B at TP 16: value and key heads per rank,
V = K = 128) and batch (1, 32, 128 by default), one decode step on a random bf16 V-major pool:

- the in-place kernel (qwen_npu/patches/kernels/gdn_decode_v_major.py) must import and compile
  (an error is named), and its output and written state must equal the float64 gated delta rule
  (qwen_npu/patches/kernels/reference.py) within bf16's rounding (2e-2 relative, the patch
  tests' bound);
- on an NPU, sgl-kernel-npu's own kernel (PR #740's ``fused_sigmoid_gating_delta_rule_update_
  decode_npu``) on a K-major copy of the same pool must agree with it, and each route is timed
  (time per call over ``iters`` calls after a warm-up), with the achieved bandwidth of the state
  traffic (read and write of N x HV x V x K bf16) and, given ``--hbm-gbps``, its share of the
  chip's HBM bandwidth.

Off the NPU the in-place kernel runs under Triton's CPU interpreter (``TRITON_INTERPRET=1``, set
before triton is first imported in this process), for correctness only: the report says "not
timed", and the comparison with sgl-kernel-npu's kernel and the timings are NPU-only checks.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from qwen_npu.qualify.claims import KERNEL_BATCHES
from qwen_npu.qualify.verdict import Check, Claim

V_MAJOR_MODULE = "qwen_npu.patches.kernels.gdn_decode_v_major"
V_MAJOR_KERNEL = "fused_sigmoid_gating_delta_rule_update_v_major"
NPU_KERNEL_MODULE = "sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent_decode_optimized"
NPU_KERNEL = "fused_sigmoid_gating_delta_rule_update_decode_npu"
DIM = 128
#: Per-rank (key heads, value heads): 35B-A3B has 16 / 32 at TP 2, 397B-A17B 16 / 64 at TP 16
#: (config.json's linear_num_key_heads / linear_num_value_heads; the upstream recipes' TP).
SHAPES: dict[str, tuple[int, int]] = {"35B-A3B TP2": (8, 16), "397B-A17B TP16": (1, 4)}
DEFAULT_BATCHES = KERNEL_BATCHES
TOLERANCE = 2e-2
AGREEMENT = 1e-3


def _on_npu() -> bool:
    try:
        # lazy: torch and torch_npu exist only in the engine image and test environments
        import torch
        import torch_npu  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return bool(torch.npu.is_available())  # type: ignore[attr-defined]


def _case(heads: int, value_heads: int, batch: int, device: str) -> dict[str, Any]:
    # lazy: torch exists only where the kernels claim runs
    import torch

    g = torch.Generator().manual_seed(batch * 131 + value_heads)
    size = batch + 2
    pool = (torch.randn(size, value_heads, DIM, DIM, generator=g) * 0.5).bfloat16()
    slots = (torch.randperm(size - 1, generator=g)[:batch] + 1).to(torch.int32)

    def r(*shape: int) -> Any:
        return torch.randn(*shape, generator=g)

    c = {
        "pool": pool,
        "q": r(1, batch, heads, DIM).bfloat16(),
        "k": r(1, batch, heads, DIM).bfloat16(),
        "v": r(1, batch, value_heads, DIM).bfloat16(),
        "a": r(batch, value_heads).bfloat16(),
        "b": r(batch, value_heads).bfloat16(),
        "A_log": r(value_heads) * 0.5,
        "dt_bias": r(value_heads) * 0.5,
        "indices": slots,
        "cu_seqlens": torch.arange(batch + 1, dtype=torch.int32),
    }
    return {k: v.to(device) for k, v in c.items()}


def _args(c: dict[str, Any]) -> dict[str, Any]:
    return {
        "A_log": c["A_log"], "a": c["a"], "dt_bias": c["dt_bias"], "softplus_beta": 1.0,
        "softplus_threshold": 20.0, "q": c["q"], "k": c["k"], "v": c["v"], "b": c["b"],
        "initial_state_indices": c["indices"], "cu_seqlens": c["cu_seqlens"],
        "use_qk_l2norm_in_kernel": True,
    }  # fmt: skip


def _rel(x: Any, ref: Any) -> float:
    return float((x.double().cpu() - ref).norm() / ref.norm())


def _check_case(kernel: Any, c: dict[str, Any]) -> tuple[float, float]:
    """(output error, state error) of the in-place kernel against float64."""
    # lazy: torch: imported by the claim that runs, not by the verb
    from qwen_npu.patches.kernels.reference import reference_decode

    idx = c["indices"].long().cpu()
    before = c["pool"].cpu().clone()
    cpu = {name: c[name].cpu() for name in ("q", "k", "v", "A_log", "a", "dt_bias", "b")}
    state, out = reference_decode(
        before[idx].mT, cpu["q"][0], cpu["k"][0], cpu["v"][0], cpu["A_log"], cpu["a"],
        cpu["dt_bias"], cpu["b"],
    )  # fmt: skip
    got = kernel(initial_state_source=c["pool"], **_args(c))
    n, hv = out.shape[0], out.shape[1]
    return _rel(got.reshape(n, hv, DIM), out), _rel(c["pool"].cpu()[idx].mT, state)


def _time(call: Any, iters: int) -> float:
    # lazy: torch exists only where the kernels claim runs
    import torch

    call()
    torch.npu.synchronize()  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
    torch.npu.synchronize()  # type: ignore[attr-defined]
    return (time.perf_counter() - t0) / iters


def _load(npu: bool) -> tuple[Any, str | None]:
    if not npu:
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            return None, "triton was imported in this process before the interpreter was set"
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        return getattr(importlib.import_module(V_MAJOR_MODULE), V_MAJOR_KERNEL), None
    except Exception as exc:  # a compile or import error is the finding, named
        return None, f"{V_MAJOR_MODULE} does not import: {type(exc).__name__}: {exc}"


def run(
    batches: Sequence[int] = DEFAULT_BATCHES, iters: int = 20, hbm_gbps: float | None = None
) -> Claim:
    """Every shape x batch: correctness everywhere, timing and the K-major kernel on an NPU."""
    npu = _on_npu()
    kernel, error = _load(npu)
    if kernel is None:
        return Claim(
            "kernels", str(error), [Check.of("in-place kernel compiles", False, str(error))]
        )
    device = "npu" if npu else "cpu"
    checks: list[Check] = []
    rows: list[dict[str, Any]] = []
    worst = 0.0
    failures: list[str] = []
    for shape, (heads, value_heads) in SHAPES.items():
        for batch in batches:
            c = _case(heads, value_heads, batch, device)
            try:
                out_err, state_err = _check_case(kernel, c)
            except Exception as exc:  # a kernel that fails at run time: named, not a traceback
                failures.append(f"{shape} batch {batch}: {type(exc).__name__}: {exc}")
                continue
            worst = max(worst, out_err, state_err)
            row = {"shape": shape, "batch": batch, "output_rel_err": out_err,
                   "state_rel_err": state_err}  # fmt: skip
            if out_err > TOLERANCE or state_err > TOLERANCE:
                failures.append(f"{shape} batch {batch}: error {max(out_err, state_err):.2e}")
            if npu:
                row.update(_npu_row(kernel, c, hbm_gbps, iters))
            rows.append(row)
    where = "on the NPU" if npu else "under Triton's CPU interpreter"
    checks.append(Check.of("in-place kernel compiles", True, f"{V_MAJOR_MODULE} {where}"))
    checks.append(
        Check.of(
            "in-place equals float64",
            not failures,
            "; ".join(failures)
            if failures
            else f"{len(rows)} cases {where}, worst relative error {worst:.2e} (limit {TOLERANCE})",
        )
    )
    if npu:
        checks += _npu_checks(rows, hbm_gbps)
    else:
        reason = "not timed: no NPU here (torch_npu); correctness ran under the interpreter"
        checks.append(Check.skip("sgl-kernel-npu on a K-major copy agrees", reason, True))
        checks.append(Check.skip("time per call and GB/s", reason, True))
    bad = next((c.evidence for c in checks if c.verdict == "fail"), None)
    summary = bad or (f"{len(rows)} cases {where}" + ("" if npu else ", not timed"))
    return Claim("kernels", summary, checks, {"device": device, "rows": rows})


def _npu_row(kernel: Any, c: dict[str, Any], hbm_gbps: float | None, iters: int) -> dict[str, Any]:
    """sgl-kernel-npu's kernel on a K-major copy, both routes timed (NPU only)."""
    row: dict[str, Any] = {}
    try:
        npu_kernel = getattr(importlib.import_module(NPU_KERNEL_MODULE), NPU_KERNEL)
    except Exception as exc:
        row["npu_kernel_error"] = f"{NPU_KERNEL_MODULE}: {type(exc).__name__}: {exc}"
        npu_kernel = None
    pool = c["pool"]
    n, hv = c["q"].shape[1], pool.shape[1]
    state_bytes = 2 * n * hv * DIM * DIM * pool.element_size()
    t_in = _time(lambda: kernel(initial_state_source=pool, **_args(c)), iters)
    row.update(in_place_ms=t_in * 1e3, in_place_gbps=state_bytes / t_in / 1e9)
    if npu_kernel is not None:
        before = pool.clone()
        copy = before.mT.contiguous()
        out_copy = npu_kernel(initial_state_source=copy, **_args(c))
        out_in = kernel(initial_state_source=before, **_args(c))
        row["agreement"] = _rel(
            out_in.reshape(n, hv, DIM), out_copy.reshape(n, hv, DIM).double().cpu()
        )

        def copy_route() -> None:
            k_major = pool.mT.contiguous()
            npu_kernel(initial_state_source=k_major, **_args(c))
            pool.copy_(k_major.mT)

        t_copy = _time(copy_route, iters)
        row.update(copy_ms=t_copy * 1e3, copy_gbps=state_bytes / t_copy / 1e9)
    if hbm_gbps:
        row["in_place_hbm_share"] = row["in_place_gbps"] / hbm_gbps
    return row


def _npu_checks(rows: list[dict[str, Any]], hbm_gbps: float | None) -> list[Check]:
    errors = [r["npu_kernel_error"] for r in rows if "npu_kernel_error" in r]
    if errors:
        agree = Check.of("sgl-kernel-npu on a K-major copy agrees", False, errors[0], True)
    else:
        worst = max((r.get("agreement", 0.0) for r in rows), default=0.0)
        agree = Check.of(
            "sgl-kernel-npu on a K-major copy agrees", worst <= AGREEMENT,
            f"worst relative difference {worst:.2e} (limit {AGREEMENT})", True,
        )  # fmt: skip
    share = "" if not hbm_gbps else f" of {hbm_gbps:.0f} GB/s HBM"
    timing = "; ".join(
        f"{r['shape']} b{r['batch']}: in place {r['in_place_ms']:.3f} ms "
        f"{r['in_place_gbps']:.0f} GB/s"
        + (f", copy route {r['copy_ms']:.3f} ms" if "copy_ms" in r else "")
        for r in rows
    )
    return [agree, Check.of("time per call and GB/s", True, timing + share, True)]
