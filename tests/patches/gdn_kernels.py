"""Stand-ins for the GDN kernels SGLang 0.5.23 calls on Ascend, and a float64 reference.

Why this exists: sgl-kernel-npu ships only as per-CANN wheels and its AscendC ops need an NPU; the
decode kernel is Triton and runs under Triton's CPU interpreter (``TRITON_INTERPRET=1``, set by
``interpreted()`` while a kernel module is decorated). Written here from reading its source
(sgl-kernel-npu ``python/sgl_kernel_npu/sgl_kernel_npu/fla/
fused_sigmoid_gating_recurrent_decode_optimized.py``, PR #740 and its later stored version):

- the wrapper ``fused_sigmoid_gating_delta_rule_update_decode_npu`` has the real parameters; q/k
  are ``[1, T, H, K]``, v ``[1, T, HV, V]`` with ``cu_seqlens`` (one token per sequence in decode);
  it launches a 1-D grid capped at the vector-core count, each program looping over (sequence,
  value head) tiles, V in blocks of ``min(next_pow2(V), 64)``, and returns ``o.view(v.shape)``;
- gating per (sequence, head): ``g = -exp(A_log) * softplus(a + dt_bias)`` (beta 1, threshold
  20), decay ``exp(g)``, ``beta = sigmoid(b)``; q and k L2-normalised (``+1e-6``), q scaled by
  ``K**-0.5``; delta rule ``h *= decay; v -= sum_k h*k; v *= beta; h += k v^T; o = sum_k h*q``,
  all in fp32, the state stored back in the pool's dtype;
- the state of slot ``idx`` is read and written at ``idx*HV*K*V + i_hv*K*V + o_k*V + o_v``
  (K-major); a negative ``idx`` starts from zeros and stores nothing.

``KERNEL_SOURCE`` with ``V_MAJOR_ADDRESS`` in place of ``K_MAJOR_ADDRESS`` is the same kernel
addressing V-major (sgl-kernel-npu issue #640's fix): ``load(...)`` writes either to a file and
imports it. The float64 reference (``reference_decode``, in the package:
qwen_npu/patches/kernels/reference.py, which ``qwen-npu qualify --kernels`` holds kernels against
too) and the verify stand-in (``reference_verify``, V-major bf16 like the AscendC
``recurrent_gated_delta_rule``, writing the intermediate cache) are plain torch.

``load_v_major()`` imports qwen-npu's own V-major decode kernel (the in-place route,
``qwen_npu/patches/kernels/gdn_decode_v_major.py``) under Triton's interpreter; it calls
``tl.sum`` and friends, so ``fixtures.triton_interpreter.library()`` must be held while it runs
(the ``v_major_kernel`` fixture does).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch

from fixtures.triton_interpreter import interpret_mode as interpreted
from qwen_npu.patches.kernels.reference import gating, reference_decode, step

__all__ = ["gating", "reference_decode", "step"]  # re-exported for the patch tests

HERE = Path(__file__).resolve().parent
KERNEL_FILE = HERE / "gdn_decode_kernel_template.py"
K_MAJOR_ADDRESS = "o_k[:, None] * V + o_v[None, :]"
V_MAJOR_ADDRESS = "o_v[None, :] * K + o_k[:, None]"


def kernel_source(layout: str = "k-major") -> str:
    source = KERNEL_FILE.read_text()
    assert K_MAJOR_ADDRESS in source
    return source if layout == "k-major" else source.replace(K_MAJOR_ADDRESS, V_MAJOR_ADDRESS)


def load(directory: Path, layout: str = "k-major") -> ModuleType:
    """The decode stand-in addressing ``layout``, written to ``directory`` and imported."""
    path = directory / f"gdn_decode_{layout.replace('-', '_')}.py"
    path.write_text(kernel_source(layout))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    with interpreted():
        import triton.experimental.gluon  # noqa: F401  (imported lazily at launch; asserts the mode)

        spec.loader.exec_module(module)
    return module


def load_v_major() -> ModuleType:
    """The in-place route's kernel module, imported afresh under the interpreter (its
    ``sys.modules`` entry replaced, so the patch's lazy import finds this one)."""
    from fixtures.triton_interpreter import interpreter
    from qwen_npu.patches.fixes.gdn_decode_state_layout import V_MAJOR_MODULE

    sys.modules.pop(V_MAJOR_MODULE, None)
    with interpreter():
        return importlib.import_module(V_MAJOR_MODULE)


def reference_verify(
    pool: torch.Tensor,
    intermediate: torch.Tensor,
    slots: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    decay: torch.Tensor,
    beta: torch.Tensor,
) -> torch.Tensor:
    """The AscendC verify op in miniature: D draft tokens per request from ``pool[slots]``.

    Like ``recurrent_gated_delta_rule`` (csrc/recurrent_gated_delta_rule, the only instantiation
    ``RGDR<bfloat16_t, bfloat16_t>``, no dtype check in its host): it reads the pool through its
    raw pointer as bf16 states laid out V-major, slot ``s`` at ``s*HV*V*K`` elements, whatever the
    tensor's dtype or strides; computes in fp32; writes step ``t`` of request ``i`` to the
    intermediate cache the same raw way, at entry ``i*D + t`` (SGLang passes
    ``ssm_state_indices = arange(N*D)``); and leaves the pool untouched.
    pool: one layer ``[S, HV, V, K]``; intermediate: one layer ``[S', D, HV, V, K]``;
    q, k: ``[N, D, H, K]``; v: ``[N, D, HV, V]``; decay, beta: ``[N, D, HV]``.
    Returns the outputs ``[N, D, HV, V]`` (fp32).
    """
    requests, draft = q.shape[:2]
    value_heads, v_dim = v.shape[2:]
    k_dim = q.shape[-1]
    plane = value_heads * v_dim * k_dim
    source, sink = _raw_bf16(pool), _raw_bf16(intermediate)
    outputs = []
    for i in range(requests):
        at = int(slots[i]) * plane
        s = source[at : at + plane].view(value_heads, v_dim, k_dim).float().mT[None]
        row = []
        for t in range(draft):
            one = [x[i : i + 1, t].float() for x in (q, k, v, decay, beta)]
            s, o = step(s, *one)
            entry = (i * draft + t) * plane
            sink[entry : entry + plane] = s[0].mT.reshape(-1).to(torch.bfloat16)
            row.append(o[0])
        outputs.append(torch.stack(row))
    return torch.stack(outputs)


def _raw_bf16(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor's memory from its first element on, as a flat run of bf16 values (a raw
    pointer's view: dtype and strides ignored)."""
    storage = tensor.untyped_storage()
    start = tensor.storage_offset() * tensor.element_size() // 2
    flat = torch.empty(0, dtype=torch.bfloat16)
    flat.set_(storage, 0, (storage.nbytes() // 2,), (1,))
    return flat[start:]
