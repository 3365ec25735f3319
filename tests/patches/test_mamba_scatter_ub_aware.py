"""mamba-scatter-ub-aware against SGLang 0.5.23's real AscendHybridLinearAttnBackend, with the
sgl_kernel_npu stand-in (tests/stubs) in place of the Triton kernel, and a torch reference of the
kernel's tiled move."""

from __future__ import annotations

import json
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from qwen_npu.patches import mamba_scatter_ub_aware as patch
from qwen_npu.patches.state import read_state
from qwen_npu.checkpoint.ub_plan import next_pow2

UB_BYTES = 196_608
OVERFLOW = "ub overflow, requires 2097152 bits while 1572864 bits available!"


def caches(
    shape: tuple[int, ...] = (2, 5, 4, 4, 128, 128), dtype: torch.dtype = torch.float32
) -> SimpleNamespace:
    """SGLang's speculative mamba caches: conv, temporal (a transposed view, as on NPU), and
    intermediate_ssm ``(L, S, D, H, V, K)``."""
    layers, slots, draft, heads, v, k = shape
    if layers * slots * draft * heads * v * k > 1 << 20:
        # Shape and dtype are all the planner reads: stride-0 views, no memory behind them.
        base = torch.zeros((), dtype=dtype).expand((layers, slots, heads, k, v))
        intermediate = torch.zeros((), dtype=dtype).expand(shape)
    else:
        base = torch.zeros((layers, slots, heads, k, v), dtype=dtype)
        intermediate = torch.randn(shape).to(dtype)
    return SimpleNamespace(
        conv=[torch.zeros((layers, slots, 8, 3), dtype=dtype)],
        temporal=base.transpose(-1, -2),
        intermediate_ssm=intermediate,
    )


def backend_for(c: SimpleNamespace, slots: list[int]) -> SimpleNamespace:
    """The attributes update_mamba_state_after_mtp_verify reads from its backend."""
    return SimpleNamespace(
        linear_attn_backend=SimpleNamespace(
            forward_metadata=SimpleNamespace(mamba_cache_indices=torch.tensor(slots)),
            req_to_token_pool=SimpleNamespace(get_speculative_mamba2_params_all_layers=lambda: c),
        )
    )


def verify(backend: ModuleType, c: SimpleNamespace, steps: list[int], **kw: Any) -> None:
    """Run SGLang's real method (unbound, on a stand-in backend object)."""
    slots = list(range(len(steps)))
    backend.AscendHybridLinearAttnBackend.update_mamba_state_after_mtp_verify(
        backend_for(c, [s + 1 for s in slots]),
        torch.tensor(steps),
        kw.get("track"),
        kw.get("track_steps"),
        None,
    )


def tiled_move(
    ssm_states: torch.Tensor,
    cache: torch.Tensor,
    dst: torch.Tensor,
    src: torch.Tensor,
    steps: torch.Tensor,
    h_block_size: int,
) -> None:
    """Torch reference of the kernel: one program per request, a loop over layers and over H in
    blocks of h_block_size, each moving one [h_block_size, next_pow2(V), next_pow2(K)] tile
    (loaded and stored under a mask, as the kernel does); a negative step skips the request."""
    layers, _, _, heads, v, k = cache.shape
    pv, pk = next_pow2(v), next_pow2(k)
    for i in range(dst.shape[0]):
        step = int(steps[i])
        if step < 0:
            continue
        for layer in range(layers):
            for h0 in range(0, heads, h_block_size):
                rows = min(h_block_size, heads - h0)
                tile = torch.zeros((h_block_size, pv, pk), dtype=cache.dtype)
                tile[:rows, :v, :k] = cache[layer, int(src[i]), step, h0 : h0 + rows]
                ssm_states[layer, int(dst[i]), h0 : h0 + rows] = tile[:rows, :v, :k]


def plain_indexing(
    ssm_states: torch.Tensor,
    cache: torch.Tensor,
    dst: torch.Tensor,
    src: torch.Tensor,
    steps: torch.Tensor,
) -> None:
    for i in range(dst.shape[0]):
        if int(steps[i]) >= 0:
            ssm_states[:, int(dst[i])] = cache[:, int(src[i]), int(steps[i])]


def test_the_rebinding_happened(backend: ModuleType) -> None:
    assert backend.move_intermediate_cache is patch.ub_aware_move_intermediate_cache
    assert patch.active()


def test_unpatched_sglang_overflows_the_ub(
    backend: ModuleType, kernel_stub: ModuleType, fresh: Any
) -> None:
    fresh(patch)
    kernel_stub.UB_BYTES = UB_BYTES
    with pytest.raises(RuntimeError) as info:
        verify(backend, caches(), [1, 0, 3])
    assert str(info.value) == OVERFLOW
    assert kernel_stub.CALLS[0]["h_block_size"] == 2  # the kernel default SGLang relies on


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [(torch.float32, 1), (torch.bfloat16, 2), (torch.float16, 2)],
)
def test_the_kernel_receives_the_planned_h_block_size(
    backend: ModuleType, kernel_stub: ModuleType, dtype: torch.dtype, expected: int
) -> None:
    kernel_stub.UB_BYTES = UB_BYTES
    c = caches(dtype=dtype)
    verify(
        backend,
        c,
        [1, -1, 3],
        track=torch.tensor([4, 0, 4]),
        track_steps=torch.tensor([0, -1, 2]),
    )
    assert [call["h_block_size"] for call in kernel_stub.CALLS] == [expected, expected]
    assert kernel_stub.CALLS[0]["intermediate_state_cache"] is c.intermediate_ssm


def test_heads_per_rank_bound_the_block(backend: ModuleType, kernel_stub: ModuleType) -> None:
    # bf16 64x64 would allow 8 heads per tile, but only 2 heads live on this rank.
    verify(backend, caches(shape=(1, 3, 2, 2, 64, 64), dtype=torch.bfloat16), [0, 1])
    assert kernel_stub.CALLS[0]["h_block_size"] == 2


def test_an_explicit_h_block_size_is_left_alone(kernel_stub: ModuleType) -> None:
    c = caches()
    idx = torch.tensor([0])
    patch.ub_aware_move_intermediate_cache(
        c.temporal, c.intermediate_ssm, idx, idx, idx, h_block_size=4
    )
    patch.ub_aware_move_intermediate_cache(c.temporal, c.intermediate_ssm, idx, idx, idx, 8)
    assert [call["h_block_size"] for call in kernel_stub.CALLS] == [4, 8]


def test_patched_scatter_moves_exactly_what_plain_indexing_moves(
    backend: ModuleType, kernel_stub: ModuleType
) -> None:
    kernel_stub.EMULATE = True
    c = caches(shape=(2, 6, 4, 4, 8, 16))
    expected = c.temporal.clone()
    steps = [2, -1, 0, 3]
    dst = torch.tensor([1, 2, 3, 4])
    plain_indexing(expected, c.intermediate_ssm, dst, torch.arange(4), torch.tensor(steps))
    verify(backend, c, steps)
    assert (c.temporal - expected).abs().max().item() == 0.0
    assert c.temporal[:, 2].abs().max().item() == 0.0  # the request with step -1 is untouched


@pytest.mark.parametrize("h_block_size", [1, 2, 8])
def test_tiled_move_reference_equals_plain_indexing(h_block_size: int) -> None:
    """max abs diff 0.0 for h_block_size 1, 2 and H, into a transpose(-1, -2) destination view,
    with requests whose step is negative."""
    torch.manual_seed(h_block_size)
    layers, slots, draft, heads, v, k = 3, 7, 4, 8, 6, 10
    cache = torch.randn((layers, slots, draft, heads, v, k))
    base_tiled = torch.randn((layers, slots, heads, k, v))
    base_plain = base_tiled.clone()
    tiled, plain = base_tiled.transpose(-1, -2), base_plain.transpose(-1, -2)
    assert not tiled.is_contiguous()
    dst = torch.tensor([6, 0, 3, 5, 1])
    src = torch.tensor([0, 1, 2, 3, 4])
    steps = torch.tensor([3, -1, 0, 2, -1])
    tiled_move(tiled, cache, dst, src, steps, h_block_size)
    plain_indexing(plain, cache, dst, src, steps)
    assert (base_tiled - base_plain).abs().max().item() == 0.0
    assert (tiled[:, 6] - cache[:, 0, 3]).abs().max().item() == 0.0
    assert not torch.equal(tiled[:, 0], cache[:, 1, 0])  # step -1: slot 0 kept its old state


def test_plane_overflow_warns_once_and_falls_back_to_one(
    backend: ModuleType, kernel_stub: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    c = caches(shape=(1, 3, 2, 2, 512, 256))
    verify(backend, c, [0, 1])
    verify(backend, c, [1, 0])
    assert [call["h_block_size"] for call in kernel_stub.CALLS] == [1, 1]
    warnings = [
        line for line in capsys.readouterr().err.splitlines() if "ub_plan.plane_overflow" in line
    ]
    assert len(warnings) == 1
    assert "level=WARNING" in warnings[0] and "mamba-ssm-dtype bfloat16" in warnings[0]


def test_the_plan_is_written_to_the_state_file(
    backend: ModuleType,
    kernel_stub: ModuleType,
    fresh: Any,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh(patch)
    monkeypatch.setenv("QWEN_NPU_STATE_DIR", str(tmp_path))
    assert patch.apply().state == "applied"
    verify(backend, caches(shape=(40, 9, 4, 16, 128, 128)), [0, 1, 2])
    state = read_state(tmp_path)
    assert state is not None
    assert state["patches"][patch.INFO.name]["state"] == "applied"
    plan = state["ub_plan"]
    assert plan["cache_shape"] == [40, 9, 4, 16, 128, 128]
    assert (plan["h_block_size"], plan["buffered_bytes"], plan["fits"]) == (1, 131072, True)
    assert plan["dtype"] == "float32" and plan["num_heads"] == 16
    json.dumps(state)  # plain JSON all the way down


def test_disabled_leaves_sglang_untouched(
    backend: ModuleType, kernel_stub: ModuleType, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh(patch)
    monkeypatch.setenv("QWEN_NPU_DISABLE_PATCHES", patch.INFO.name)
    assert patch.apply().state == "disabled"
    verify(backend, caches(), [0])
    assert kernel_stub.CALLS[0]["h_block_size"] == 2


def test_drifted_caller_is_not_patched(
    backend: ModuleType, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh(patch)
    monkeypatch.setattr(patch, "PINNED_FINGERPRINT", "f" * 64)
    outcome = patch.apply()
    assert outcome.state == "drifted"
    assert "update_mamba_state_after_mtp_verify: source fingerprint" in outcome.detail
    assert not patch.active()


def test_kernel_without_h_block_size_is_drift(
    backend: ModuleType, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh(patch)

    def old_kernel(ssm_states: Any, cache: Any, dst: Any, src: Any, steps: Any) -> None:
        return None

    monkeypatch.setattr(backend, "move_intermediate_cache", old_kernel)
    outcome = patch.apply()
    assert outcome.state == "drifted"
    assert "no h_block_size" in outcome.detail


def test_upstream_fix_is_detected_by_behaviour(
    backend: ModuleType, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh(patch)
    cls = backend.AscendHybridLinearAttnBackend

    def fixed_upstream(self: Any, steps: Any, track: Any, track_steps: Any, model: Any) -> None:
        c = self.linear_attn_backend.req_to_token_pool.get_speculative_mamba2_params_all_layers()
        idx = self.linear_attn_backend.forward_metadata.mamba_cache_indices
        backend.move_intermediate_cache(
            c.temporal, c.intermediate_ssm, idx, idx, steps, h_block_size=1
        )

    monkeypatch.setattr(cls, "update_mamba_state_after_mtp_verify", fixed_upstream)
    assert patch.apply().state == "upstream-fixed"
    assert not patch.active()
