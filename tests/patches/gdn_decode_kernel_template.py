"""Stand-in for sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent_decode_optimized (tests only).

Runs under Triton's CPU interpreter; ``gdn_kernels.load`` writes this file out (as is: K-major
like the real kernel, or with the state address made V-major) and imports it. See
``gdn_kernels`` for what it follows in the real kernel.
"""

import triton
import triton.language as tl

VECTOR_CORES = 4  # the real wrapper caps its 1-D grid at the AIV vector-core count


def _sum(x, axis=None):
    """``tl.sum``. tl.sum and tl.zeros are jit functions, which the interpreter cannot call when
    triton was imported before TRITON_INTERPRET was set (SGLang imports it first); tl.reduce with
    tl.sum's own combine function and tl.full are its builtins."""
    return tl.reduce(x, axis, tl.standard._sum_combine)


@triton.jit
def _decode_kernel(
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
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_QK_L2NORM_IN_KERNEL: tl.constexpr,
):
    o_k = tl.arange(0, BK)
    mask_k = o_k < K
    for tile in tl.range(tl.program_id(0), N * HV, tl.num_programs(0)):
        i_n = tile // HV
        i_hv = tile % HV
        i_h = i_hv // (HV // H)
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        t_len = (tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos).to(tl.int32)

        x = tl.load(a + bos * HV + i_hv).to(tl.float32) + tl.load(dt_bias + i_hv).to(tl.float32)
        soft = tl.where(
            softplus_beta * x <= softplus_threshold,
            tl.log(1.0 + tl.exp(softplus_beta * x)) / softplus_beta,
            x,
        )
        decay = tl.exp(-tl.exp(tl.load(A_log + i_hv).to(tl.float32)) * soft)
        beta = 1.0 / (1.0 + tl.exp(-tl.load(b + bos * HV + i_hv).to(tl.float32)))

        idx = tl.load(h0_indices + i_n)
        for i_v in tl.range(0, (V + BV - 1) // BV):  # tl.cdiv is jit: not callable here
            o_v = i_v * BV + tl.arange(0, BV)
            mask_v = o_v < V
            mask_h = mask_k[:, None] & mask_v[None, :]
            p_h0 = h0_source + idx * HV * K * V + i_hv * K * V + o_k[:, None] * V + o_v[None, :]
            for t in tl.range(0, t_len):
                row = bos + t
                b_q = tl.load(q + (row * H + i_h) * K + o_k, mask=mask_k).to(tl.float32)
                b_k = tl.load(k + (row * H + i_h) * K + o_k, mask=mask_k).to(tl.float32)
                b_v = tl.load(v + (row * HV + i_hv) * V + o_v, mask=mask_v).to(tl.float32)
                if idx >= 0:
                    b_h = tl.load(p_h0 + t * HV * K * V, mask=mask_h).to(tl.float32)
                else:
                    b_h = tl.full([BK, BV], 0.0, tl.float32)
                if USE_QK_L2NORM_IN_KERNEL:
                    b_q = b_q / (tl.sqrt(_sum(b_q * b_q)) + 1e-6)
                    b_k = b_k / (tl.sqrt(_sum(b_k * b_k)) + 1e-6)
                b_q = b_q * scale
                b_h *= decay
                b_v = (b_v - _sum(b_h * b_k[:, None], 0)) * beta
                b_h += b_k[:, None] * b_v[None, :]
                if idx >= 0:
                    tl.store(p_h0 + t * HV * K * V, b_h.to(h0_source.dtype.element_ty), mask=mask_h)
                b_o = _sum(b_h * b_q[:, None], 0)
                tl.store(o + (row * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty), mask=mask_v)


def fused_sigmoid_gating_delta_rule_update_decode_npu(
    A_log,
    a,
    dt_bias,
    softplus_beta,
    softplus_threshold,
    q,
    k,
    v,
    b,
    initial_state_source,
    initial_state_indices,
    scale=None,
    use_qk_l2norm_in_kernel=False,
    cu_seqlens=None,
):
    assert initial_state_source.is_contiguous()  # as in the later stored version
    q, k, v, a, b = (t.contiguous() for t in (q, k, v, a, b))
    _, tokens, heads, k_dim = q.shape
    value_heads, v_dim = v.shape[2], v.shape[3]
    n = len(cu_seqlens) - 1
    assert tokens == n, "decode: one token per sequence"
    o = q.new_empty(n, value_heads, v_dim)
    _decode_kernel[(max(1, min(n * value_heads, VECTOR_CORES)),)](
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
        H=heads,
        HV=value_heads,
        K=k_dim,
        V=v_dim,
        BK=triton.next_power_of_2(k_dim),
        BV=min(triton.next_power_of_2(v_dim), 64),
        USE_QK_L2NORM_IN_KERNEL=use_qk_l2norm_in_kernel,
    )
    return o.view(v.shape)
