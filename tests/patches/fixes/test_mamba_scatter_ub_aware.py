"""mamba-scatter-ub-aware against SGLang 0.5.23's real AscendHybridLinearAttnBackend, with the
sgl_kernel_npu stand-in (tests/stubs) in place of the Triton kernel: the stand-in moves states the
way the real kernel does (masked tiles, flat offsets inside the slot)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from qwen_npu.patches.fixes import mamba_scatter_ub_aware as patch
from qwen_npu.patches.state import read_state

UB_BYTES = 196_608
OVERFLOW = "ub overflow, requires 2097152 bits while 1572864 bits available!"


def caches(
    shape: tuple[int, ...] = (2, 5, 4, 4, 128, 128), dtype: torch.dtype = torch.float32
) -> SimpleNamespace:
    """SGLang 0.5.23's speculative mamba caches: conv, temporal ``(L, S, H, V, K)`` contiguous (as
    its memory pool allocates it), and intermediate_ssm ``(L, S, D, H, V, K)``."""
    layers, slots, draft, heads, v, k = shape
    if layers * slots * draft * heads * v * k > 1 << 20:
        # Shape and dtype are all the planner reads: stride-0 views, no memory behind them.
        temporal = torch.zeros((), dtype=dtype).expand((layers, slots, heads, v, k))
        intermediate = torch.zeros((), dtype=dtype).expand(shape)
    else:
        temporal = torch.zeros((layers, slots, heads, v, k), dtype=dtype)
        intermediate = torch.randn(shape).to(dtype)
    return SimpleNamespace(
        conv=[torch.zeros((layers, slots, 8, 3), dtype=dtype)],
        temporal=temporal,
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


def test_an_explicit_h_block_size_is_left_alone(
    backend: ModuleType, kernel_stub: ModuleType
) -> None:
    # backend: the patch wraps the kernel SGLang's backend imports, so SGLang comes first.
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


@pytest.mark.parametrize(
    ("heads", "h_block_size"), [(8, 1), (8, 2), (8, 4), (8, 8), (6, 4), (3, 2)]
)
def test_the_kernel_into_a_contiguous_state_equals_plain_indexing(
    kernel_stub: ModuleType, heads: int, h_block_size: int
) -> None:
    """The layout SGLang 0.5.23 allocates: max abs diff 0.0 for every power-of-two h, including an
    h that does not divide H (the kernel masks h < H), with requests whose step is negative."""
    kernel_stub.EMULATE = True
    torch.manual_seed(heads * 10 + h_block_size)
    layers, slots, draft, v, k = 3, 7, 4, 6, 10
    cache = torch.randn((layers, slots, draft, heads, v, k))
    moved = torch.randn((layers, slots, heads, v, k))
    before, expected = moved.clone(), moved.clone()
    dst, src = torch.tensor([6, 0, 3, 5, 1]), torch.tensor([0, 1, 2, 3, 4])
    steps = torch.tensor([3, -1, 0, 2, -1])
    kernel_stub.move_intermediate_cache(moved, cache, dst, src, steps, h_block_size=h_block_size)
    plain_indexing(expected, cache, dst, src, steps)
    assert (moved - expected).abs().max().item() == 0.0
    assert torch.equal(moved[:, 0], before[:, 0])  # step -1: slot 0 kept its old state
    assert torch.equal(moved[:, 2], before[:, 2])  # no request writes slot 2


def test_the_kernel_into_a_transposed_view_copies_bytes_not_a_transpose(
    kernel_stub: ModuleType,
) -> None:
    """Strides below the slot are ignored: written at the flat offset h*V*K + v*K + k, a
    ``transpose(-1, -2)`` destination receives the source's bytes in source order."""
    kernel_stub.EMULATE = True
    torch.manual_seed(0)
    layers, slots, draft, heads, v, k = 2, 4, 3, 4, 6, 10
    cache = torch.randn((layers, slots, draft, heads, v, k))
    base = torch.zeros((layers, slots, heads, k, v))
    view = base.transpose(-1, -2)
    assert not view.is_contiguous()
    dst, src, steps = torch.tensor([2, 0]), torch.tensor([1, 3]), torch.tensor([2, -1])
    kernel_stub.move_intermediate_cache(view, cache, dst, src, steps, h_block_size=2)
    source_order = cache[:, 1, 2].reshape(layers, -1)
    assert torch.equal(base[:, 2].reshape(layers, -1), source_order)  # a physical copy
    assert not torch.equal(view[:, 2], cache[:, 1, 2])  # not the logical assignment
    assert base[:, 0].abs().max().item() == 0.0  # step -1: untouched


@pytest.mark.parametrize("h_block_size", [3, 6])
def test_a_non_power_of_two_h_block_size_does_not_compile(
    kernel_stub: ModuleType, h_block_size: int
) -> None:
    c = caches(shape=(1, 3, 2, 6, 8, 8))
    idx = torch.tensor([0])
    with pytest.raises(ValueError, match="arange's range must be a power of 2"):
        kernel_stub.move_intermediate_cache(
            c.temporal, c.intermediate_ssm, idx, idx, idx, h_block_size=h_block_size
        )


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
    monkeypatch.setattr(patch, "PINS", (replace(patch.PINS[0], fingerprint="f" * 64),))
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
