"""Stand-in for ``sgl_kernel_npu.mamba.mamba_state_update_triton`` (tests only).

``move_intermediate_cache`` has the real wrapper's parameters (``h_block_size`` defaults to 2 there
too) and shape: it launches a kernel over a grid of one program per request, passing
``h_block_size`` as the kernel's ``H_BLOCK_SIZE``. The kernel here is plain Python and torch, and
does what sgl-kernel-npu's Triton kernel does (tag 2026.08.21, run under Triton's CPU interpreter):

- a request whose ``last_step`` is < 0 is skipped;
- it loops over layers, and over H in steps of ``H_BLOCK_SIZE`` with a mask ``h < H`` (an h that
  does not divide H is still correct);
- each step moves an ``[H_BLOCK_SIZE, next_pow2(V), next_pow2(K)]`` tile, masked on H, V and K;
- the source is read and the destination written at the flat offset ``h*V*K + v*K + k`` from the
  (layer, slot) base, using only the layer and slot strides of the destination (and the layer,
  slot and draft-step strides of the source): strides below the slot are ignored, so into a
  transposed destination view it copies the source's bytes in source order;
- a non-power-of-two ``h_block_size`` does not compile: ``arange's range must be a power of 2``.

Every call is recorded in ``CALLS``. The move itself runs when ``EMULATE`` is true (tests that only
look at the call pass stride-0 tensors with no memory behind them). When ``UB_BYTES`` is set, a tile
that overflows the unified buffer (doubled by the multi-buffer pass) raises the compiler's error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

CALLS: list[dict[str, Any]] = []
ROLLBACK_CALLS: list[dict[str, Any]] = []
EMULATE = False
UB_BYTES: int | None = None
BUFFERS = 2


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _arange(start: int, end: int) -> torch.Tensor:
    """``tl.arange``: the range must be a power of two (a compile error otherwise)."""
    size = end - start
    if size <= 0 or size & (size - 1):
        raise ValueError("arange's range must be a power of 2")
    return torch.arange(start, end)


def _flat(tensor: torch.Tensor, offset: int) -> torch.Tensor:
    """The tensor's memory as one flat run of elements from ``offset`` (a raw pointer's view)."""
    storage_elements = tensor.untyped_storage().nbytes() // tensor.element_size()
    return torch.as_strided(tensor, (storage_elements - offset,), (1,), offset)


class _Kernel:
    """``kernel[grid](**kwargs)``: checks the tile against the UB, then runs one program per id."""

    def __init__(self, body: Callable[..., None]) -> None:
        self.body = body

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        def launch(**kwargs: Any) -> None:
            tile = kwargs["H_BLOCK_SIZE"] * kwargs["BLOCK_V"] * kwargs["BLOCK_K"]
            _arange(0, kwargs["H_BLOCK_SIZE"])  # compiles only for a power of two
            if UB_BYTES is not None:
                bits = 8 * BUFFERS * tile * kwargs["src_cache_ptr"].element_size()
                if bits > 8 * UB_BYTES:
                    raise RuntimeError(
                        f"ub overflow, requires {bits} bits while {8 * UB_BYTES} bits available!"
                    )
            if EMULATE:
                for program_id in range(grid[0]):
                    self.body(program_id, **kwargs)

        return launch


@_Kernel
def _move_kernel(
    program_id: int,
    *,
    dst_cache_ptr: torch.Tensor,
    src_cache_ptr: torch.Tensor,
    dst_indices_ptr: torch.Tensor,
    src_indices_ptr: torch.Tensor,
    last_steps_ptr: torch.Tensor,
    layer_stride: int,
    size_stride: int,
    draft_stride: int,
    dst_layer_stride: int,
    dst_size_stride: int,
    h_dim: int,
    dim_v: int,
    dim_k: int,
    num_layers: int,
    H_BLOCK_SIZE: int,
    BLOCK_V: int,
    BLOCK_K: int,
) -> None:
    """One program: one request's state, every layer, H in blocks of H_BLOCK_SIZE."""
    dst_slot = int(dst_indices_ptr[program_id])
    src_slot = int(src_indices_ptr[program_id])
    last_step = int(last_steps_ptr[program_id])
    if last_step < 0:
        return
    h_offsets = _arange(0, H_BLOCK_SIZE)
    v_offsets = _arange(0, BLOCK_V)
    k_offsets = _arange(0, BLOCK_K)
    for layer in range(num_layers):
        src = _flat(
            src_cache_ptr,
            src_cache_ptr.storage_offset()
            + layer * layer_stride
            + src_slot * size_stride
            + last_step * draft_stride,
        )
        dst = _flat(
            dst_cache_ptr,
            dst_cache_ptr.storage_offset() + layer * dst_layer_stride + dst_slot * dst_size_stride,
        )
        for h_start in range(0, h_dim, H_BLOCK_SIZE):
            h_real = h_start + h_offsets
            mask = (
                (h_real < h_dim)[:, None, None]
                & (v_offsets < dim_v)[None, :, None]
                & (k_offsets < dim_k)[None, None, :]
            )
            offsets = (
                h_real[:, None, None] * dim_v * dim_k
                + v_offsets[None, :, None] * dim_k
                + k_offsets[None, None, :]
            )
            tile = torch.zeros((H_BLOCK_SIZE, BLOCK_V, BLOCK_K), dtype=src_cache_ptr.dtype)
            tile[mask] = src[offsets[mask]]  # masked load, other=0
            dst[offsets[mask]] = tile[mask]  # masked store


def move_intermediate_cache(
    ssm_states, intermediate_state_cache, dst_indices, src_indices, last_steps, h_block_size=2
):
    CALLS.append(
        {
            "ssm_states": ssm_states,
            "intermediate_state_cache": intermediate_state_cache,
            "dst_indices": dst_indices,
            "src_indices": src_indices,
            "last_steps": last_steps,
            "h_block_size": h_block_size,
        }
    )
    layers, _, _, heads, v, k = intermediate_state_cache.shape
    strides = intermediate_state_cache.stride()
    _move_kernel[(len(dst_indices),)](
        dst_cache_ptr=ssm_states,
        src_cache_ptr=intermediate_state_cache,
        dst_indices_ptr=dst_indices,
        src_indices_ptr=src_indices,
        last_steps_ptr=last_steps,
        layer_stride=strides[0],
        size_stride=strides[1],
        draft_stride=strides[2],
        dst_layer_stride=ssm_states.stride(0),
        dst_size_stride=ssm_states.stride(1),
        h_dim=heads,
        dim_v=v,
        dim_k=k,
        num_layers=layers,
        H_BLOCK_SIZE=h_block_size,
        BLOCK_V=_next_pow2(v),
        BLOCK_K=_next_pow2(k),
    )
    return ssm_states


def conv_state_rollback(conv_states, dst_indices, last_steps, draft_token_num):
    """With ``EMULATE``, what sgl-kernel-npu's ``_conv_state_rollback_kernel`` does: for each
    request with a step >= 0, shift = draft_token_num - 1 - step; when > 0, window rows
    [0, W - shift) move to [shift, W), last row first, in every layer (W = conv_states.shape[2])."""
    ROLLBACK_CALLS.append(
        {"dst_indices": dst_indices, "last_steps": last_steps, "draft_token_num": draft_token_num}
    )
    if not EMULATE:
        return
    window = conv_states.shape[2]
    for slot, step in zip(dst_indices.tolist(), last_steps.tolist(), strict=True):
        shift = draft_token_num - 1 - step
        if step < 0 or shift <= 0:
            continue
        for row in range(window - shift - 1, -1, -1):
            conv_states[:, slot, row + shift] = conv_states[:, slot, row]


def reset() -> None:
    CALLS.clear()
    ROLLBACK_CALLS.clear()
