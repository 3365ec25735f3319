"""MTP answers what plain decode answers, on CPU: the upstream pull request's accuracy check
("baseline output is correct; with speculation garbled") in miniature, for one GDN layer.

A prefill, then the same token stream two ways, on SGLang 0.5.23's MambaPool (NPU configuration):

- plain decode: one token per step through SGLang's TritonGDNKernel.decode with the
  gdn-decode-state-layout patch (in place: qwen-npu's V-major kernel; the copy route: the
  sgl-kernel-npu decode stand-in on a K-major copy), under Triton's interpreter;
- NEXTN: D draft tokens per step through a stand-in for the AscendC verify op (V-major bf16,
  writing the intermediate cache: gdn_kernels.reference_verify), a random accepted length per
  request, then SGLang's real ``update_mamba_state_after_mtp_verify`` with the mover stand-in
  (the real mover's byte order) and the real rollback's semantics on the widened conv window.

Outputs, final SSM states and conv windows agree within bf16 tolerance; each known-bad pair
diverges: the decode patch off; an fp32 pool read by the bf16-only verify op; a transposed pool
view with a stride-honouring mover (sgl-kernel-npu #748's pair; the source-order mover on the same
view is the control). The errors measured are printed (pytest -s) and in docs/patches.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from qwen_npu.patches import gdn_contract
from qwen_npu.patches.fixes import gdn_decode_state_layout as patch

from .gdn_kernels import gating, reference_verify, step

pytestmark = pytest.mark.sglang

H, HV, DIM, CONV_K, DRAFT = 1, 2, 16, 4, 3
CONV_DIM = HV * DIM + 2 * H * DIM  # the pool's conv width: value dim + 2 x key dim
SLOTS = (1, 3)
PROMPT, TOKENS = 3, 8
BF16_TOLERANCE = 3e-2


@dataclass
class Stream:
    """Every position's inputs for each request (enough for the last verify's overshoot)."""

    q: torch.Tensor  # [N, P + T + D, H, K]
    k: torch.Tensor
    v: torch.Tensor  # [N, ., HV, V]
    a: torch.Tensor  # [N, ., HV]
    b: torch.Tensor
    x: torch.Tensor  # [N, ., CONV_DIM]: the conv's raw inputs (mixed_qkv rows)
    A_log: torch.Tensor
    dt_bias: torch.Tensor


def stream(seed: int = 0) -> Stream:
    g = torch.Generator().manual_seed(seed)
    n, length = len(SLOTS), PROMPT + TOKENS + DRAFT

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).bfloat16()

    return Stream(
        r(n, length, H, DIM), r(n, length, H, DIM), r(n, length, HV, DIM), r(n, length, HV),
        r(n, length, HV), r(n, length, CONV_DIM), torch.randn(HV, generator=g) * 0.5 - 2.0,
        torch.randn(HV, generator=g) * 0.5,
    )  # fmt: skip


def new_pool(ssm_dtype: torch.dtype = torch.bfloat16) -> Any:
    return gdn_contract.sglang_mamba_pool(
        heads=HV, v=DIM, k=DIM, ssm_dtype=ssm_dtype, size=4, draft=DRAFT, conv_kernel=CONV_K
    ).mamba_cache


def memory(temporal: torch.Tensor, slot: int) -> torch.Tensor:
    """One slot's memory read V-major ``[HV, V, K]`` (as the AscendC ops see it: a raw pointer,
    whatever the tensor's strides say; on a contiguous pool this is ``temporal[slot]``)."""
    start = temporal.storage_offset() + slot * temporal.stride(0)
    return torch.as_strided(temporal, (HV, DIM, DIM), (DIM * DIM, DIM, 1), start)


def prefill(s: Stream, temporal: torch.Tensor, conv: torch.Tensor) -> None:
    """The chunk op's result: the prompt's state written V-major into the slot's memory, its last
    K-1 inputs at the end of the conv window (where the verify op reads them: SGLang #34794)."""
    for i, slot in enumerate(SLOTS):
        state = torch.zeros(1, HV, DIM, DIM, dtype=torch.float64)
        decay, beta = gating(s.A_log, s.a[i, :PROMPT], s.dt_bias, s.b[i, :PROMPT])
        for t in range(PROMPT):
            one = [x[i : i + 1, t].double() for x in (s.q, s.k, s.v)]
            state, _ = step(state, *one, decay[t : t + 1], beta[t : t + 1])
        memory(temporal, slot).copy_(state[0].mT)
        conv[slot, -(CONV_K - 1) :] = s.x[i, PROMPT - CONV_K + 1 : PROMPT]


def plain_decode(gdn_triton: ModuleType, s: Stream, upto: list[int]) -> dict[str, Any]:
    """Plain decode of each request up to position ``upto[i]`` (one token per step)."""
    cache = new_pool()
    temporal, conv = cache.temporal[0], torch.zeros(max(SLOTS) + 1, CONV_K - 1, CONV_DIM)
    prefill(s, temporal, conv)
    outputs: list[list[torch.Tensor]] = [[] for _ in SLOTS]
    kernel = gdn_triton.TritonGDNKernel()
    for pos in range(PROMPT, max(upto)):
        live = [pos < end for end in upto]
        idx = torch.tensor([slot if on else -1 for slot, on in zip(SLOTS, live, strict=True)])
        out = kernel.decode(
            s.q[None, :, pos], s.k[None, :, pos], s.v[None, :, pos], s.a[:, pos], s.b[:, pos],
            A_log=s.A_log, dt_bias=s.dt_bias, ssm_states=temporal,
            cache_indices=idx.to(torch.int32),
            query_start_loc=torch.arange(len(SLOTS) + 1, dtype=torch.int32),
        ).reshape(len(SLOTS), HV, DIM)  # fmt: skip
        for i, slot in enumerate(SLOTS):
            if live[i]:
                outputs[i].append(out[i].float())
                conv[slot] = torch.cat([conv[slot, 1:], s.x[i, pos : pos + 1]])
    return {
        "outputs": [torch.stack(o) for o in outputs],
        "states": torch.stack([memory(temporal, slot) for slot in SLOTS]).float(),
        "conv": conv[list(SLOTS)],
    }


def stride_honouring_mover(ssm_states: Any, cache: Any, dst: Any, src: Any, steps: Any, *a: Any,
                           **k: Any) -> Any:  # fmt: skip
    """The interim mover #748 reverted: a logical copy through the destination's strides."""
    for i in range(dst.shape[0]):
        if int(steps[i]) >= 0:
            ssm_states[:, int(dst[i])] = cache[:, int(src[i]), int(steps[i])]
    return ssm_states


def nextn(
    backend: ModuleType,
    s: Stream,
    *,
    seed: int = 0,
    ssm_dtype: torch.dtype = torch.bfloat16,
    transposed: bool = False,
    mover: Any = None,
) -> dict[str, Any]:
    """Verify D drafts per step, accept a random prefix per request, commit through SGLang."""
    cache: Any = new_pool(ssm_dtype)
    if transposed:  # the pool before SGLang #39589: [.., HV, K, V] memory seen as [.., V, K]
        physical = torch.zeros((*cache.temporal.shape[:-2], DIM, DIM), dtype=ssm_dtype)
        cache = SimpleNamespace(**{**vars(cache), "temporal": physical.transpose(-1, -2)})
    temporal, conv = cache.temporal[0], cache.conv[0][0]
    prefill(s, temporal, conv)
    rng = random.Random(seed)
    pos = [PROMPT] * len(SLOTS)
    outputs: list[list[torch.Tensor]] = [[] for _ in SLOTS]
    method = backend.AscendHybridLinearAttnBackend.update_mamba_state_after_mtp_verify
    pool = SimpleNamespace(get_speculative_mamba2_params_all_layers=lambda: cache)
    owner = SimpleNamespace(  # the attributes SGLang's method reads from its backend
        linear_attn_backend=SimpleNamespace(
            forward_metadata=SimpleNamespace(mamba_cache_indices=torch.tensor(SLOTS)),
            req_to_token_pool=pool,
        )
    )
    while min(pos) < PROMPT + TOKENS:
        window = [slice(p, p + DRAFT) for p in pos]
        q, k, v, a, b = (torch.stack([x[i, w] for i, w in enumerate(window)])
                         for x in (s.q, s.k, s.v, s.a, s.b))  # fmt: skip
        decay, beta = gating(s.A_log, a, s.dt_bias, b)
        out = reference_verify(temporal, cache.intermediate_ssm[0], torch.tensor(SLOTS), q, k, v,
                               decay.float(), beta.float())  # fmt: skip
        for i, slot in enumerate(SLOTS):  # the verify conv op writes the widened window
            conv[slot] = torch.cat([conv[slot, -(CONV_K - 1) :], s.x[i, window[i]]])[
                -conv.shape[1] :
            ]
        accepted = [rng.randint(1, DRAFT) for _ in SLOTS]
        for i, n in enumerate(accepted):
            outputs[i].extend(out[i, :n])
            pos[i] += n
        steps = torch.tensor([n - 1 for n in accepted])
        if mover is None:
            method(owner, steps, None, None, None)
        else:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(backend, "move_intermediate_cache", mover)
                method(owner, steps, None, None, None)
    return {
        "outputs": [torch.stack(o) for o in outputs],
        "states": torch.stack([memory(temporal, slot) for slot in SLOTS]).float(),
        "conv": conv[list(SLOTS), -(CONV_K - 1) :],
        "positions": pos,
    }


def errors(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """Relative errors of b against a: outputs (over each request's first TOKENS), SSM states,
    conv windows."""

    def rel(x: torch.Tensor, y: torch.Tensor) -> float:
        return float((x.double() - y.double()).norm() / y.double().norm())

    out = max(
        rel(o[:TOKENS], ref[:TOKENS]) for o, ref in zip(b["outputs"], a["outputs"], strict=True)
    )
    return {
        "output": out,
        "state": rel(b["states"], a["states"]),
        "conv": rel(b["conv"], a["conv"]),
    }


@pytest.fixture(scope="module")
def world(
    gdn_triton: ModuleType,
    backend: ModuleType,
    decode_kernels: dict[str, ModuleType],
    v_major_kernel: ModuleType,
) -> Any:
    """gdn_triton bound to the K-major decode stand-in with the patch applied (its default
    route: in place, qwen-npu's V-major kernel under the interpreter), the mover stand-in
    emulating; the stream and the NEXTN run every case compares against."""
    stub = __import__("sgl_kernel_npu.mamba.mamba_state_update_triton", fromlist=["x"])
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("QWEN_NPU_DISABLE_PATCHES", raising=False)
        mp.delenv("QWEN_NPU_STATE_DIR", raising=False)
        mp.delenv(patch.ROUTE_ENV, raising=False)
        mp.setattr(stub, "EMULATE", True)
        patch.revert()
        kernel = decode_kernels["k-major"].fused_sigmoid_gating_delta_rule_update_decode_npu
        mp.setattr(gdn_triton, patch.KERNEL, kernel)
        assert patch.apply().state == "applied" and patch.route() == patch.IN_PLACE
        s = stream()
        spec = nextn(backend, s)
        yield SimpleNamespace(stream=s, nextn=spec, upto=spec["positions"])
        patch.revert()
    patch.apply()
    stub.reset()


MEASURED: dict[str, dict[str, float]] = {}


def record(case: str, errs: dict[str, float]) -> None:
    MEASURED[case] = errs
    print(f"{case}: " + ", ".join(f"{k} {v:.3g}" for k, v in errs.items()))


def test_nextn_with_random_acceptance_matches_plain_decode(
    gdn_triton: ModuleType, world: Any
) -> None:
    plain = plain_decode(gdn_triton, world.stream, world.upto)
    errs = errors(plain, world.nextn)
    record("patched decode (in place) vs NEXTN", errs)
    assert all(v < BF16_TOLERANCE for v in errs.values()), errs
    assert [len(o) for o in plain["outputs"]] == [p - PROMPT for p in world.upto]


def test_the_copy_route_matches_nextn_too(
    gdn_triton: ModuleType, world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gdn_triton.TritonGDNKernel, "decode", patch.k_major_decode)
    errs = errors(plain_decode(gdn_triton, world.stream, world.upto), world.nextn)
    record("patched decode (copy route) vs NEXTN", errs)
    assert all(v < BF16_TOLERANCE for v in errs.values()), errs


def test_decode_patch_off_diverges(
    gdn_triton: ModuleType, world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gdn_triton.TritonGDNKernel, "decode", patch._original)
    errs = errors(world.nextn, plain_decode(gdn_triton, world.stream, world.upto))
    record("decode patch off vs NEXTN", errs)
    assert errs["output"] > 0.3 and errs["state"] > 0.1


def test_an_fp32_pool_read_by_the_bf16_only_verify_op_diverges(
    gdn_triton: ModuleType, backend: ModuleType, world: Any
) -> None:
    plain = plain_decode(gdn_triton, world.stream, world.upto)
    errs = errors(plain, nextn(backend, world.stream, ssm_dtype=torch.float32))
    record("fp32 pool, bf16-only verify vs plain decode", {"output": errs["output"]})
    assert errs["output"] > 0.3


def test_a_transposed_view_with_a_stride_honouring_mover_diverges(
    gdn_triton: ModuleType, backend: ModuleType, world: Any
) -> None:
    control = errors(world.nextn, nextn(backend, world.stream, transposed=True))
    record("transposed view, source-order mover vs NEXTN", control)
    assert all(v < BF16_TOLERANCE for v in control.values())  # raw readers, raw mover: agree
    bad = errors(
        world.nextn, nextn(backend, world.stream, transposed=True, mover=stride_honouring_mover)
    )
    record("transposed view, stride-honouring mover vs NEXTN", bad)
    assert bad["output"] > 0.3 and bad["state"] > 0.1
