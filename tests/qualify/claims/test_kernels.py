"""The kernels claim's judgement: a kernel that writes the state transposed (sgl-kernel-npu issue
#640's K-major addressing on a V-major pool) is caught; the float64 math itself passes.

The kernel stand-ins are plain torch over the package's float64 reference, so this runs in-process
without triton; the real kernel under Triton's interpreter is test_end_to_end's.
"""

from __future__ import annotations

from typing import Any

import torch

from qwen_npu.patches.kernels.reference import reference_decode
from qwen_npu.qualify.claims import kernels


def _stand_in(transposed: bool) -> Any:
    def kernel(initial_state_source: torch.Tensor, **kw: Any) -> torch.Tensor:
        pool, idx = initial_state_source, kw["initial_state_indices"].long()
        q, k, v = kw["q"][0], kw["k"][0], kw["v"][0]
        state, out = reference_decode(
            pool[idx].mT, q, k, v, kw["A_log"], kw["a"], kw["dt_bias"], kw["b"]
        )
        pool[idx] = (state if transposed else state.mT).to(pool.dtype)
        return out.to(q.dtype)

    return kernel


def test_the_math_passes_and_a_transposed_state_fails() -> None:
    heads, value_heads = kernels.SHAPES["397B-A17B TP16"]
    case = kernels._case(heads, value_heads, 4, "cpu")
    good = kernels._check_case(_stand_in(False), {k: v.clone() for k, v in case.items()})
    assert max(good) < kernels.TOLERANCE
    bad = kernels._check_case(_stand_in(True), case)
    assert bad[1] > kernels.TOLERANCE  # the state written back transposed
