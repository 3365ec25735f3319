"""Stand-in for ``sgl_kernel_npu.mamba.mamba_state_update_triton`` (tests only).

``move_intermediate_cache`` has the real kernel's parameters (``h_block_size`` defaults to 2 there
too) and records every call in ``CALLS`` instead of launching a Triton program, so a test can see
exactly which ``h_block_size`` SGLang's caller (patched or not) passed. When ``EMULATE`` is true it
also performs the move with plain indexing, and when ``UB_BYTES`` is set it raises the kernel
compiler's error for a tile that overflows the unified buffer (doubled by the multi-buffer pass).
"""

from __future__ import annotations

from typing import Any

CALLS: list[dict[str, Any]] = []
ROLLBACK_CALLS: list[dict[str, Any]] = []
EMULATE = False
UB_BYTES: int | None = None
BUFFERS = 2


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


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
    if UB_BYTES is not None:
        *_, v, k = intermediate_state_cache.shape
        bits = (
            8 * BUFFERS * h_block_size * _next_pow2(v) * _next_pow2(k)
            * intermediate_state_cache.element_size()
        )
        if bits > 8 * UB_BYTES:
            raise RuntimeError(
                f"ub overflow, requires {bits} bits while {8 * UB_BYTES} bits available!"
            )
    if EMULATE:
        for i in range(int(dst_indices.shape[0])):
            step = int(last_steps[i])
            if step >= 0:
                ssm_states[:, int(dst_indices[i])] = intermediate_state_cache[
                    :, int(src_indices[i]), step
                ]


def conv_state_rollback(conv_states, dst_indices, last_steps, draft_token_num):
    ROLLBACK_CALLS.append(
        {"dst_indices": dst_indices, "last_steps": last_steps, "draft_token_num": draft_token_num}
    )


def reset() -> None:
    CALLS.clear()
    ROLLBACK_CALLS.clear()
