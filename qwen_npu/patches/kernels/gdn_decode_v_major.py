"""Plain-decode GDN kernel that updates the SSM state pool where it lies, V-major, in place.

Why: SGLang 0.5.23 keeps a slot's state as ``[HV, V, K]`` (math state ``S[k][v]`` at ``v*K + k``),
as the AscendC prefill and verify ops read it, while the decode kernel it calls on NPU
(sgl-kernel-npu PR #740) addresses ``k*V + v``. The copy route of ``gdn-decode-state-layout``
transposes around that kernel (8 state-sized passes beside its own 2); this kernel does its math
on the pool's own order, reading and writing the state once.

Same math, step for step, as the replaced kernel (``kernels/reference.py`` states it; fp32 inside,
the state stored in the pool's dtype), and the same edge cases: a negative index starts from zeros
and stores nothing, a row of ``cu_seqlens`` without a token touches nothing, token ``t`` of a row
uses slot ``idx + t``. Written with the replaced kernel's triton-ascend constructs only: its tile
(``BK = next_pow2(K)``, ``BV = min(next_pow2(V), 64)``: a ``[64, 128]`` fp32 tile is 32 KiB of the
192 KiB UB), static shapes, no host sync, a 1-D grid capped at the vector-core count,
``num_warps=4``, ``multibuffer=False``; the slot offset in int64 (the replaced kernel's int32
product overflows past 2**31 elements of one layer's pool). Two things it re-does are done once
(issue 41): q and k are loaded and normalised once per token, outside the V-block loop, and q, k,
v, a and b are read through their strides (SGLang passes views of its packed projections, which
the replaced kernel copies first). Imported lazily by the fix (torch and triton).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

#: The replaced kernel's V block cap (its ``BV = min(next_pow2(V), 64)``).
BV_CAP = 64
#: The grid cap off the NPU (Triton's CPU interpreter runs the programs one after another).
CPU_PROGRAMS = 4


@triton.jit(do_not_specialize=["N"])  # type: ignore[untyped-decorator]
def _decode_v_major_kernel(  # type: ignore[no-untyped-def]  # triton kernel parameters
    A_log,
    a,
    dt_bias,
    softplus_beta,
    softplus_threshold,
    q,
    k,
    v,
    b,
    o,
    h0_source,
    h0_indices,
    cu_seqlens,
    scale,
    N,
    stride_qt,
    stride_kt,
    stride_vt,
    stride_at,
    stride_ah,
    stride_bt,
    stride_bh,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_QK_L2NORM_IN_KERNEL: tl.constexpr,
):
    o_k = tl.arange(0, BK)
    o_base_v = tl.arange(0, BV)
    mask_k = o_k < K
    NV = tl.cdiv(V, BV)
    for tile in tl.range(tl.program_id(0), N * HV, tl.num_programs(0)):
        i_n = tile // HV
        i_hv = tile % HV
        i_h = i_hv // (HV // H)
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        t_len = (tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos).to(tl.int32)

        x = tl.load(a + bos * stride_at + i_hv * stride_ah).to(tl.float32)
        x += tl.load(dt_bias + i_hv).to(tl.float32)
        beta_x = softplus_beta * x
        softplus_x = tl.where(
            beta_x <= softplus_threshold,
            (1.0 / softplus_beta) * tl.log(1.0 + tl.exp(beta_x)),
            x,
        )
        b_decay = tl.exp(-tl.exp(tl.load(A_log + i_hv).to(tl.float32)) * softplus_x)
        b_beta = 1.0 / (
            1.0 + tl.exp(-tl.load(b + bos * stride_bt + i_hv * stride_bh).to(tl.float32))
        )

        p_q = q + bos * stride_qt + i_h * K + o_k
        p_k = k + bos * stride_kt + i_h * K + o_k
        idx = tl.load(h0_indices + i_n).to(tl.int64)
        for i in tl.range(0, t_len):
            # q and k once per token of the tile (decode: once per (request, head)), shared by
            # every V block below; masked lanes are 0, so they add nothing to the norms.
            b_q = tl.load(p_q + i * stride_qt, mask=mask_k, other=0.0).to(tl.float32)
            b_k = tl.load(p_k + i * stride_kt, mask=mask_k, other=0.0).to(tl.float32)
            if USE_QK_L2NORM_IN_KERNEL:
                b_q = b_q / (tl.sqrt(tl.sum(b_q * b_q)) + 1e-6)
                b_k = b_k / (tl.sqrt(tl.sum(b_k * b_k)) + 1e-6)
            b_q = b_q * scale
            for i_v in tl.range(0, NV):
                o_v = i_v * BV + o_base_v
                mask_v = o_v < V
                mask_h = mask_v[:, None] & mask_k[None, :]
                p_v = v + (bos + i) * stride_vt + i_hv * V + o_v
                p_o = o + ((bos + i) * HV + i_hv) * V + o_v
                # V-major: row v of the tile is K contiguous elements of the slot's [V, K] plane;
                # token i of the row uses slot idx + i, as the replaced kernel does.
                p_h0 = (
                    h0_source
                    + (idx + i) * HV * V * K
                    + i_hv * V * K
                    + o_v[:, None] * K
                    + o_k[None, :]
                )
                b_v = tl.load(p_v, mask=mask_v, other=0.0).to(tl.float32)
                if idx >= 0:
                    b_h = tl.load(p_h0, mask=mask_h, other=0.0).to(tl.float32)
                else:
                    b_h = tl.zeros([BV, BK], dtype=tl.float32)

                b_h *= b_decay
                b_v -= tl.sum(b_h * b_k[None, :], 1)
                b_v *= b_beta
                b_h += b_v[:, None] * b_k[None, :]
                b_o = tl.sum(b_h * b_q[None, :], 1)

                if idx >= 0:
                    tl.store(p_h0, b_h.to(h0_source.dtype.element_ty), mask=mask_h)
                tl.store(p_o, b_o.to(o.dtype.element_ty), mask=mask_v)


@functools.cache
def _npu_vector_cores(index: int) -> int:
    properties = triton.runtime.driver.active.utils.get_device_properties(index)
    cores = int(properties.get("num_vectorcore", -1))
    if cores <= 0:
        raise RuntimeError(f"triton reports no vector cores for npu:{index}: {properties}")
    return cores


def programs(tiles: int, device: torch.device) -> int:
    """The 1-D grid: one program per (request, value head) tile, at most one per vector core
    (the NPU's count, read once per device, as the replaced kernel sizes its grid)."""
    if device.type == "npu":
        cap = _npu_vector_cores(device.index if device.index is not None else 0)
    else:
        cap = CPU_PROGRAMS
    return max(1, min(tiles, cap))


def _rows(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, int]:
    """``x`` ``[1, T, heads, dim]`` and its token stride: used as it lies when each token's heads
    are packed (a split of SGLang's projection), else copied."""
    if x.stride(-1) != 1 or x.stride(-2) != dim:
        x = x.contiguous()
    return x, x.stride(-3)


def fused_sigmoid_gating_delta_rule_update_v_major(
    A_log: torch.Tensor,
    a: torch.Tensor,
    dt_bias: torch.Tensor,
    softplus_beta: float,
    softplus_threshold: float,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    b: torch.Tensor,
    initial_state_source: torch.Tensor,
    initial_state_indices: torch.Tensor,
    scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """The replaced kernel's call, parameter for parameter, on a V-major pool updated in place.

    q, k: ``[1, T, H, K]``; v: ``[1, T, HV, V]``; a, b: ``[T, HV]``; ``initial_state_source``:
    the pool ``[slots, HV, V, K]``, contiguous; ``initial_state_indices``: ``[N]``;
    ``cu_seqlens``: ``[N + 1]`` (SGLang's ``query_start_loc``). Returns ``[N, HV, V]`` in q's
    dtype. Raises ValueError for a pool it cannot update in place (a copy would drop the update).
    """
    _, _, heads, k_dim = q.shape
    value_heads, v_dim = v.shape[-2], v.shape[-1]
    pool = initial_state_source
    if cu_seqlens is None:
        raise ValueError("gdn decode (V-major): cu_seqlens is required (SGLang's query_start_loc)")
    if tuple(pool.shape[1:]) != (value_heads, v_dim, k_dim) or not pool.is_contiguous():
        raise ValueError(
            f"gdn decode (V-major): the state pool is {tuple(pool.shape)} with strides "
            f"{pool.stride()}, not a contiguous [slots, {value_heads}, {v_dim}, {k_dim}]; an "
            "in-place update cannot go through a copy (set the decode route to copy)"
        )
    if scale is not None and not scale > 0:
        raise ValueError(f"gdn decode (V-major): scale must be positive, got {scale}")
    n = cu_seqlens.shape[0] - 1
    q, stride_qt = _rows(q, k_dim)
    k, stride_kt = _rows(k, k_dim)
    v, stride_vt = _rows(v, v_dim)
    if a.dim() != 2 or b.dim() != 2 or a.shape[-1] != value_heads or b.shape[-1] != value_heads:
        raise ValueError(
            f"gdn decode (V-major): a {tuple(a.shape)} and b {tuple(b.shape)} must be "
            f"[tokens, {value_heads}]"
        )
    o = q.new_empty(n, value_heads, v_dim)
    launch: dict[str, Any] = {"num_warps": 4, "num_stages": 1}
    if q.device.type == "npu":
        launch["multibuffer"] = False  # a triton-ascend compile option, as the replaced kernel
    _decode_v_major_kernel[(programs(n * value_heads, q.device),)](
        A_log=A_log,
        a=a,
        dt_bias=dt_bias,
        softplus_beta=softplus_beta,
        softplus_threshold=softplus_threshold,
        q=q,
        k=k,
        v=v,
        b=b,
        o=o,
        h0_source=initial_state_source,
        h0_indices=initial_state_indices,
        cu_seqlens=cu_seqlens,
        scale=k_dim**-0.5 if scale is None else scale,
        N=n,
        stride_qt=stride_qt,
        stride_kt=stride_kt,
        stride_vt=stride_vt,
        stride_at=a.stride(0),
        stride_ah=a.stride(1),
        stride_bt=b.stride(0),
        stride_bh=b.stride(1),
        H=heads,
        HV=value_heads,
        K=k_dim,
        V=v_dim,
        BK=triton.next_power_of_2(k_dim),
        BV=min(triton.next_power_of_2(v_dim), BV_CAP),
        USE_QK_L2NORM_IN_KERNEL=use_qk_l2norm_in_kernel,
        **launch,
    )
    return o
