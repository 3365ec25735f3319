"""Patch ``gdn-decode-state-layout``: plain decode reads the SSM state pool as it is laid out.

What: rebinds ``TritonGDNKernel.decode`` (SGLang's GDN decode call,
``sglang/srt/layers/attention/linear/kernels/gdn_triton.py``) to a wrapper. The wrapper gathers
the batch's states from the pool (``[slots, HV, V, K]``, V-major), hands the kernel a dense
K-major copy ``[N, HV, K, V]`` with the indices ``0..N-1`` (a negative index stays negative: the
kernel starts that row from zeros and stores nothing), calls SGLang's own ``decode`` on it, and
writes the updated states back into the pool V-major. SGLang's code and the kernel are unchanged.

Why: without speculation (``mtp.enabled=false``, the ``make mtp-off`` lever) the decode step runs
sgl-kernel-npu's Triton kernel ``fused_sigmoid_gating_delta_rule_update_decode_npu``
(``fla/fused_sigmoid_gating_recurrent_decode_optimized.py``, PR #740), which addresses slot
``idx`` at ``idx*HV*K*V + i_hv*K*V + o_k*V + o_v`` (K-major), while SGLang 0.5.23's pool and the
AscendC prefill and verify ops hold the state V-major. With ``V == K == 128`` nothing fails: the
kernel reads and writes the state transposed, and the text is wrong (under Triton's CPU
interpreter through SGLang's decode: relative error 1.25 on the output, 0.61 on the state written
back; patched 3.4e-3 on both: tests/patches/fixes/test_gdn_decode_state_layout.py). Under NEXTN the
target's GDN layers never run this kernel, which is why MTP-on output is right.

How: applied when ``gdn_triton`` has been imported (see ``hook``). Behaviour probe: SGLang's
``decode`` is run on tiny CPU tensors against a recording stand-in kernel; if it hands the kernel
something other than the pool itself, or the kernel it calls (the name
``fused_sigmoid_gating_delta_rule_update`` in ``gdn_triton``) addresses the state V-major
(``kernel_layout.decode_addressing``, read from its source), the fix is upstream. Drift guard:
0.5.23's signature and source fingerprint of ``TritonGDNKernel.decode``, a kernel that still takes
``initial_state_source``/``initial_state_indices``, and an addressing that reads as K-major (an
unreadable one is drift: transposing for a kernel that no longer needs it would break it).
Hot-path cost: per GDN layer and step, 8 x N x HV x V x K x itemsize bytes moved beside the
kernel's own 2x (a gather and a transpose copy in, a transpose copy and a scatter out); for the
35B profile at batch 32 (TP 2: 16 value heads, 128x128 bf16, 30 GDN layers) 128 MiB a layer,
3.75 GiB a step (``hot_path_bytes``). Static shapes, no host sync: graph capture keeps working.
The decode patch and the GDN contract (``gdn_contract``, whose start-up report this module's
``apply`` triggers) are documented in docs/patches.md.

Upstream: https://github.com/sgl-project/sglang/pull/34353 (the pull request these patches
follow); sgl-kernel-npu issue #640 (open: "indexes the SSM state pool K-major while the pool is
V-major"), PR #761 (fixes the generic kernel only).
Remove when: the installed decode kernel addresses the state V-major (this patch then reports
``upstream-fixed``), or SGLang's ``TritonGDNKernel.decode`` hands it a K-major state itself.
"""

from __future__ import annotations

import inspect
import sys
import threading
from typing import Any

from qwen_npu.patches import core, gdn_contract, kernel_layout
from qwen_npu.patches.hook import TRIGGERS
from qwen_npu.patches.registry import get_patch

INFO = get_patch("gdn-decode-state-layout")
(GDN_TRITON,) = TRIGGERS[__name__]
CLASS = "TritonGDNKernel"
METHOD = "decode"
KERNEL = "fused_sigmoid_gating_delta_rule_update"
KERNEL_PARAMS = ("initial_state_source", "initial_state_indices")

#: What the target looks like in SGLang 0.5.23 (the drift guard's reference).
PINS = (
    core.Pin(
        GDN_TRITON,
        f"{CLASS}.{METHOD}",
        ("self", "q", "k", "v", "a", "b", "A_log", "dt_bias", "ssm_states", "cache_indices",
         "query_start_loc", "kwargs"),
        "e3c6f76195a1aaf540aa74faf49a579e1b5d64ba1a01ac411b04e426678627fe",
    ),
)  # fmt: skip
_original: Any = None


def k_major_decode(
    self: Any,
    q: Any,
    k: Any,
    v: Any,
    a: Any,
    b: Any,
    *,
    A_log: Any,
    dt_bias: Any,
    ssm_states: Any,
    cache_indices: Any,
    query_start_loc: Any,
    **kwargs: Any,
) -> Any:
    """SGLang's decode on a K-major copy of the batch's states, written back V-major."""
    import torch

    rows = cache_indices.clamp(min=0).to(torch.int64)
    states = ssm_states.index_select(0, rows).transpose(-1, -2).contiguous()
    own = torch.arange(rows.shape[0], device=rows.device, dtype=cache_indices.dtype)
    own = torch.where(cache_indices >= 0, own, cache_indices)
    out = _original(
        self, q, k, v, a, b,
        A_log=A_log, dt_bias=dt_bias, ssm_states=states, cache_indices=own,
        query_start_loc=query_start_loc, **kwargs,
    )  # fmt: skip
    ssm_states.index_copy_(0, rows, states.transpose(-1, -2).contiguous())
    return out


def hot_path_bytes(batch: int, heads: int, v: int, k: int, itemsize: int, layers: int) -> int:
    """Bytes the wrapper moves per decode step beside the kernel: 4 copies, each read + write."""
    return 8 * batch * heads * v * k * itemsize * layers


def _load() -> Any:
    module = sys.modules.get(GDN_TRITON)
    if module is None:
        raise core.TargetMissing(f"{GDN_TRITON} is not imported")
    cls = getattr(module, CLASS, None)
    if cls is None or not callable(getattr(cls, METHOD, None)):
        raise core.TargetMissing(f"{GDN_TRITON} has no {CLASS}.{METHOD}")
    if not callable(getattr(module, KERNEL, None)):
        raise core.TargetMissing(f"{GDN_TRITON} binds no {KERNEL} (the decode kernel)")
    return module


def _kernel(module: Any) -> Any:
    return getattr(module, KERNEL)


def addressing(module: Any) -> kernel_layout.Reading:
    """How the kernel SGLang's decode calls addresses the state, read from its module's source."""
    kernel = _kernel(module)
    where = f"{getattr(kernel, '__module__', '?')}:{getattr(kernel, '__name__', '?')}"
    try:
        source = inspect.getsource(sys.modules[kernel.__module__])
    except (AttributeError, KeyError, OSError, TypeError):
        return kernel_layout.Reading(kernel_layout.UNKNOWN, None, f"no source for {where}")
    reading = kernel_layout.decode_addressing(source, kernel.__name__)
    return kernel_layout.Reading(reading.verdict, reading.line, f"{where}: {reading.reason}")


def _probe(module: Any) -> core.Probe:
    """Run SGLang's decode on tiny CPU tensors: what state does it hand the kernel?"""
    import torch

    handed: list[Any] = []

    def recorder(**kwargs: Any) -> Any:
        handed.append(kwargs.get("initial_state_source"))
        return kwargs["v"]

    pool = torch.zeros((3, 1, 2, 4))
    tokens = torch.zeros((1, 2, 1, 4))
    with core.swapped(module, **{KERNEL: recorder}):
        getattr(module, CLASS).__dict__[METHOD](
            None, tokens, tokens, torch.zeros((1, 2, 1, 2)), torch.zeros((2, 1)),
            torch.zeros((2, 1)), A_log=torch.zeros(1), dt_bias=torch.zeros(1),
            ssm_states=pool, cache_indices=torch.tensor([1, 2]),
            query_start_loc=torch.tensor([0, 1, 2]),
        )  # fmt: skip
    if len(handed) != 1:
        return None
    state = handed[0]
    if not (isinstance(state, torch.Tensor) and state.data_ptr() == pool.data_ptr()):
        return "fixed"  # SGLang hands over something else than its V-major pool
    if state.stride() != pool.stride():
        return "fixed"
    reading = addressing(module)
    if reading.verdict == kernel_layout.V_MAJOR:
        return "fixed"
    return "needed" if reading.verdict == kernel_layout.K_MAJOR else None


def _check(module: Any) -> str | None:
    (pin,) = PINS
    mismatch = core.pin_mismatch(pin, getattr(module, CLASS).__dict__[METHOD])
    if mismatch is not None:
        return mismatch
    params = core.parameter_names(_kernel(module))
    if params is not None and not set(KERNEL_PARAMS) <= set(params):
        return f"{KERNEL}: parameters {params} lack {KERNEL_PARAMS} (sgl-kernel-npu changed)"
    reading = addressing(module)
    if reading.verdict != kernel_layout.K_MAJOR:
        return f"the decode kernel's state addressing is {reading.verdict}: {reading.reason}"
    return None


def _rebind(module: Any) -> str:
    global _original
    cls = getattr(module, CLASS)
    _original = cls.__dict__[METHOD]
    setattr(cls, METHOD, k_major_decode)
    reading = addressing(module)
    return (
        f"{CLASS}.{METHOD} wrapped: the kernel gets a K-major copy of the batch's states "
        f"({reading.reason}, line {reading.line})"
    )


_once = core.Once(INFO, load=_load, probe=_probe, check=_check, rebind=_rebind)
_contract_lock = threading.Lock()
_contract_reported = False


def apply() -> core.Outcome:
    """Apply once per process (later calls return the first outcome); the first call also
    reports the GDN state contract (log lines and the state file)."""
    global _contract_reported
    outcome = _once.apply()
    with _contract_lock:
        if not _contract_reported:
            _contract_reported = True
            gdn_contract.report()
    return outcome


def active() -> bool:
    """True when SGLang's TritonGDNKernel.decode currently is this patch's wrapper."""
    module = sys.modules.get(GDN_TRITON)
    cls = getattr(module, CLASS, None)
    return cls is not None and cls.__dict__.get(METHOD) is k_major_decode


def revert() -> None:
    """Put SGLang's decode back and forget the outcome (tests, debugging)."""
    global _original
    with _once.lock:
        cls = getattr(sys.modules.get(GDN_TRITON), CLASS, None)
        if _original is not None and cls is not None:
            setattr(cls, METHOD, _original)
        _original = None
        _once.forget()
        core.OUTCOMES.pop(INFO.name, None)
