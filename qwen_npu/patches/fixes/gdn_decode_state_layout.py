"""Patch ``gdn-decode-state-layout``: plain decode reads the SSM state pool as it is laid out.

What: rebinds ``TritonGDNKernel.decode`` (SGLang's ``.../linear/kernels/gdn_triton.py``), by route
``QWEN_NPU_GDN_DECODE_ROUTE`` (the chart's ``patches.gdnDecodeRoute``): ``in-place`` (the default)
runs SGLang's own ``decode`` body with the kernel name it calls bound to
``qwen_npu.patches.kernels.gdn_decode_v_major``, the replaced kernel's parameters and math on the
V-major pool where it lies; ``copy`` (also taken, with a WARNING, when that kernel does not import
or the variable holds anything else) hands the upstream kernel a dense K-major copy of the batch's
states ``[N, HV, K, V]`` with indices ``0..N-1`` (a negative index stays negative: no store) and
writes them back V-major. SGLang's code and sgl-kernel-npu's kernel are unchanged either way.

Why: without speculation (``mtp.enabled=false``, ``make mtp-off``) decode runs sgl-kernel-npu's
``fused_sigmoid_gating_delta_rule_update_decode_npu`` (PR #740), which addresses slot ``idx`` at
``idx*HV*K*V + i_hv*K*V + o_k*V + o_v`` (K-major), while SGLang 0.5.23's pool and the AscendC
prefill and verify ops hold the state V-major. With ``V == K == 128`` nothing fails and the text is
wrong (under Triton's CPU interpreter through SGLang's decode: relative error 1.25 on the output,
0.61 on the state written back; patched 3.4e-3 on both, the bf16 state's rounding:
tests/patches/fixes/test_gdn_decode_state_layout.py). Under NEXTN the target's GDN layers never run
this kernel. Not the V-major AscendC verify op instead: it normalises q and k with another formula,
takes bf16 states only, reads a negative index as unsigned, and cannot run here; our Triton kernel
runs under the interpreter and agrees with the replaced kernel on a K-major copy to 1e-4.

How: applied when ``gdn_triton`` is imported (``hook``). Behaviour probe: SGLang's ``decode`` on
tiny CPU tensors against a recording kernel; it is upstream-fixed when SGLang hands the kernel
something other than the pool, or the kernel it calls addresses the state V-major (read from its
source, ``upstream.kernels.decode_addressing``). Drift guard: 0.5.23's signature and fingerprint
of ``TritonGDNKernel.decode``, a kernel still taking ``initial_state_source``/``_indices``, and an
addressing that reads K-major (unreadable is drift). Cost per GDN layer and step
(``decode_traffic``, checked under Triton's interpreter): in place, the replaced kernel's own
state traffic (2 x N x HV x V x K x itemsize) plus the token rows; the copy route adds 8 x N x HV x
V x K x itemsize (35B at batch 32, TP 2: 128 MiB a layer, 3.75 GiB a step, ``hot_path_bytes``).
Static shapes, no host sync: graph capture keeps working. ``apply`` also reports the GDN contract
(``gdn_contract``, docs/patches.md).

Upstream: https://github.com/sgl-project/sglang/pull/34353 (the pull request these patches
follow); sgl-kernel-npu issue #640 (open: "indexes the SSM state pool K-major while the pool is
V-major"), PR #761 (fixes the generic kernel only).
Remove when: the installed decode kernel addresses the state V-major (this patch then reports
``upstream-fixed``), or SGLang's ``TritonGDNKernel.decode`` hands it a K-major state itself.
"""

from __future__ import annotations

import importlib
import os
import threading
import types
from collections.abc import Callable, Mapping
from typing import Any

from qwen_npu.log import PartLog
from qwen_npu.patches import core, gdn_contract
from qwen_npu.patches.hook import TRIGGERS
from qwen_npu.patches.registry import get_patch
from qwen_npu.upstream import kernels, source

INFO = get_patch("gdn-decode-state-layout")
(GDN_TRITON,) = TRIGGERS[__name__]
CLASS = "TritonGDNKernel"
METHOD = "decode"
KERNEL = "fused_sigmoid_gating_delta_rule_update"
KERNEL_PARAMS = ("initial_state_source", "initial_state_indices")

#: The decode route (the chart's ``patches.gdnDecodeRoute`` renders it for the engine).
ROUTE_ENV = "QWEN_NPU_GDN_DECODE_ROUTE"
IN_PLACE, COPY = "in-place", "copy"
ROUTES = (IN_PLACE, COPY)
#: The V-major kernel the in-place route binds (imported lazily: it needs torch and triton).
V_MAJOR_MODULE = "qwen_npu.patches.kernels.gdn_decode_v_major"
V_MAJOR_KERNEL = "fused_sigmoid_gating_delta_rule_update_v_major"

log = PartLog("patches")

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
_route: str | None = None


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
    # lazy: the engine's stack (torch, SGLang), not the base install's
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
    """Bytes the copy route moves per decode step beside the kernel: 4 copies, each read + write."""
    return 8 * batch * heads * v * k * itemsize * layers


def decode_traffic(
    route: str,
    *,
    batch: int,
    heads: int,
    value_heads: int,
    v: int,
    k: int,
    sizes: Mapping[str, int],
    stored: int | None = None,
    split_views: bool = False,
) -> dict[str, int]:
    """Bytes one GDN layer's decode step moves, per tensor, from the kernels' loads and stores.

    Per (request, value head) tile: ``cu_seqlens`` twice, ``a``, ``b``, ``A_log``, ``dt_bias``
    once; per V block (``ceil(V / min(next_pow2(V), 64))``) and token: v, o and the state block
    read and written (index >= 0); q, k and the index: per V block in the replaced kernel, once
    in ours. ``stored`` rows (default all) have an index >= 0; ``sizes``: itemsize per
    tensor. The copy route adds ``copies`` (``hot_path_bytes``) and, with ``split_views`` (q, k,
    v, a, b as views of SGLang's packed projections), ``view_copies``: the replaced wrapper's
    ``.contiguous()`` of each (read + write); ours reads the views in place.
    """
    if route not in ROUTES:
        raise ValueError(f"route {route!r}: one of {', '.join(ROUTES)}")
    stored = batch if stored is None else stored
    blocks = -(-v // min(1 << max(v - 1, 0).bit_length(), 64))
    tiles = batch * value_heads
    plane = v * k * sizes["state"]
    per_block = blocks if route == COPY else 1  # q, k and the index: per V block, or once
    traffic = {
        "state_read": stored * value_heads * plane,
        "state_write": stored * value_heads * plane,
        "q": tiles * per_block * k * sizes["q"],
        "k": tiles * per_block * k * sizes["k"],
        "v": tiles * v * sizes["v"],
        "o": tiles * v * sizes["o"],
        "gating": tiles * (sizes["a"] + sizes["b"] + sizes["A_log"] + sizes["dt_bias"]),
        "indices": tiles * (per_block * sizes["indices"] + 2 * sizes["cu_seqlens"]),
        "copies": 0,
        "view_copies": 0,
    }
    if route == COPY:
        traffic["copies"] = hot_path_bytes(batch, value_heads, v, k, sizes["state"], 1)
        if split_views:
            # one token a row; q and k have `heads` heads, v, a and b `value_heads`
            row = heads * k * (sizes["q"] + sizes["k"]) + value_heads * (
                v * sizes["v"] + sizes["a"] + sizes["b"]
            )
            traffic["view_copies"] = 2 * batch * row
    return traffic


def _route_from(environ: Mapping[str, str]) -> tuple[str, str | None]:
    """(route, why the copy route is taken against the setting, or None)."""
    raw = environ.get(ROUTE_ENV, "").strip() or IN_PLACE
    if raw in ROUTES:
        return raw, None
    return COPY, f"{ROUTE_ENV}={raw!r} is not one of {', '.join(ROUTES)}"


def with_kernel(function: Any, module: Any, kernel: Callable[..., Any]) -> Any:
    """SGLang's own ``function`` (``TritonGDNKernel.decode``), with the name ``KERNEL`` it looks
    up in its module bound to ``kernel``: the same code object, so the arguments the kernel gets
    are SGLang's (pinned by the drift guard's fingerprint), over a snapshot of the module's
    globals taken when the patch applies."""
    scope = dict(vars(module))
    scope[KERNEL] = kernel
    clone = types.FunctionType(
        function.__code__, scope, function.__name__, function.__defaults__, function.__closure__
    )
    clone.__kwdefaults__ = function.__kwdefaults__
    clone.__qualname__ = function.__qualname__
    clone.__doc__ = function.__doc__
    clone.__wrapped__ = function  # type: ignore[attr-defined]
    return clone


def _load() -> Any:
    module = core.loaded(GDN_TRITON)
    cls = getattr(module, CLASS, None)
    if cls is None or not callable(getattr(cls, METHOD, None)):
        raise core.TargetMissing(f"{GDN_TRITON} has no {CLASS}.{METHOD}")
    kernel = getattr(module, KERNEL, None)
    if not callable(kernel):
        raise core.TargetMissing(f"{GDN_TRITON} binds no {KERNEL} (the decode kernel)")
    origin = str(getattr(kernel, "__module__", ""))
    if origin.startswith("sglang."):
        # Off the NPU SGLang binds its own decode kernel (V-major): judging it would call the fix
        # upstream; the kernel this patch is about, sgl-kernel-npu's, is bound only on an NPU.
        raise core.TargetMissing(
            f"{GDN_TRITON} binds SGLang's own {origin}.{KERNEL} (what it runs off the NPU), not "
            "sgl-kernel-npu's: the NPU's decode kernel is judged in the engine image "
            "(`qwen-npu patches verify --build`) and at start-up; here its tests stand in"
        )
    return module


def addressing(module: Any) -> kernels.Reading:
    """How the kernel SGLang's decode calls addresses the state, read from its module's source."""
    kernel = getattr(module, KERNEL)
    where = f"{getattr(kernel, '__module__', '?')}:{getattr(kernel, '__name__', '?')}"
    text = source.module_source(kernel)
    if text is None:
        return kernels.Reading(kernels.UNKNOWN, None, f"no source for {where}")
    reading = kernels.decode_addressing(text, kernel.__name__)
    return kernels.Reading(reading.verdict, reading.line, f"{where}: {reading.reason}")


def _probe(module: Any) -> core.Probe:
    """Run SGLang's decode on tiny CPU tensors: what state does it hand the kernel?"""
    # lazy: the engine's stack (torch, SGLang), not the base install's
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
    if reading.verdict == kernels.V_MAJOR:
        return "fixed"
    return "needed" if reading.verdict == kernels.K_MAJOR else None


def _check(module: Any) -> str | None:
    (pin,) = PINS
    mismatch = core.pin_mismatch(pin, getattr(module, CLASS).__dict__[METHOD])
    if mismatch is not None:
        return mismatch
    params = core.parameter_names(getattr(module, KERNEL))
    if params is not None and not set(KERNEL_PARAMS) <= set(params):
        return f"{KERNEL}: parameters {params} lack {KERNEL_PARAMS} (sgl-kernel-npu changed)"
    reading = addressing(module)
    if reading.verdict != kernels.K_MAJOR:
        return f"the decode kernel's state addressing is {reading.verdict}: {reading.reason}"
    return None


def _rebind(module: Any) -> str:
    global _original, _route
    cls = getattr(module, CLASS)
    _original = cls.__dict__[METHOD]
    reading = addressing(module)
    route, why = _route_from(os.environ)
    bound: Any = k_major_decode
    if route == IN_PLACE:
        try:
            kernel = getattr(importlib.import_module(V_MAJOR_MODULE), V_MAJOR_KERNEL)
            bound = with_kernel(_original, module, kernel)
        except Exception as exc:  # any import failure of torch/triton/the kernel: the copy route
            route, why = COPY, f"{V_MAJOR_MODULE} does not import ({type(exc).__name__}: {exc})"
    _route = route
    _once.rebind(cls, METHOD, bound)
    if why is not None:
        log(
            "warning",
            "gdn_decode.route_fallback",
            route=COPY,
            reason=why,
            next=f"set {ROUTE_ENV} to {IN_PLACE} (the chart's patches.gdnDecodeRoute) or {COPY}",
        )
    about = f"the kernel: {reading.reason}, line {reading.line}"
    if route == IN_PLACE:
        return (
            f"{CLASS}.{METHOD} rebound, route {IN_PLACE}: SGLang's decode calls "
            f"{V_MAJOR_MODULE}.{V_MAJOR_KERNEL} on the V-major pool ({about})"
        )
    return (
        f"{CLASS}.{METHOD} wrapped, route {COPY}: the kernel gets a K-major copy of the "
        f"batch's states ({about})"
    )


def route() -> str | None:
    """The route this process took (``in-place`` or ``copy``); None while not applied."""
    return _route if _once.active() else None


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


active, revert = _once.active, _once.revert  # revert: tests, debugging
