"""The gated delta rule in float64: what a GDN decode kernel's output and state must equal.

Why in the package: the patch tests and ``qwen-npu qualify``'s kernels claim (on an NPU, or under
Triton's interpreter) both hold kernels against it. Math states are ``S[n, hv, k, v]`` (K-major);
a V-major pool holds their transpose. Per (request, value head): ``g = -exp(A_log) *
softplus(a + dt_bias)`` (threshold 20), decay ``exp(g)``, ``beta = sigmoid(b)``; q and k
L2-normalised (``+1e-6``), q scaled by ``K**-0.5``; ``h *= decay; v -= sum_k h*k; v *= beta;
h += k v^T; o = sum_k h*q``. Plain torch, imported lazily by its users.
"""

from __future__ import annotations

import torch


def gating(
    A_log: torch.Tensor, a: torch.Tensor, dt_bias: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(decay, beta) per (token, value head), float64."""
    x = a.double() + dt_bias.double()
    softplus = torch.where(x <= 20.0, torch.log1p(torch.exp(x)), x)
    decay: torch.Tensor = torch.exp(-torch.exp(A_log.double()) * softplus)
    beta: torch.Tensor = torch.sigmoid(b.double())
    return decay, beta


def _normalised(x: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = x / (x.norm(dim=-1, keepdim=True) + 1e-6)
    return out


def step(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    decay: torch.Tensor,
    beta: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the gated delta rule on math states ``S[n, hv, k, v]`` (any float dtype).

    q, k: ``[N, H, K]`` (grouped over HV), v: ``[N, HV, V]``, decay/beta: ``[N, HV]``.
    Returns (new state, output ``[N, HV, V]``).
    """
    heads, value_heads = q.shape[1], v.shape[1]
    group = value_heads // heads
    qn = _normalised(q).repeat_interleave(group, dim=1) * q.shape[-1] ** -0.5
    kn = _normalised(k).repeat_interleave(group, dim=1)
    state = state * decay[..., None, None]
    delta = (v - torch.einsum("nhkv,nhk->nhv", state, kn)) * beta[..., None]
    state = state + kn[..., :, None] * delta[..., None, :]
    return state, torch.einsum("nhkv,nhk->nhv", state, qn)


def reference_decode(
    states: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    A_log: torch.Tensor,
    a: torch.Tensor,
    dt_bias: torch.Tensor,
    b: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 decode of one token per request from math states ``[N, HV, K, V]``."""
    decay, beta = gating(A_log, a, dt_bias, b)
    return step(states.double(), q.double(), k.double(), v.double(), decay, beta)
