"""Patch ``gdn-decode-state-layout``: plain decode reads the SSM state pool as it is laid out.

What: rebinds ``TritonGDNKernel.decode`` (SGLang's GDN decode call,
``sglang/srt/layers/attention/linear/kernels/gdn_triton.py``). Two routes, chosen at apply time by
``QWEN_NPU_GDN_DECODE_ROUTE`` (the chart's ``patches.gdnDecodeRoute``, next to the kill switch):

- ``in-place`` (the default): SGLang's own ``decode`` body, run with the kernel name it calls
  bound to ``qwen_npu.patches.kernels.gdn_decode_v_major`` (a Triton kernel with the replaced
  kernel's parameters and math that reads and writes each request's state where it lies in the
  pool, V-major). No copy: the state is read once and written once.
- ``copy`` (the fallback; also taken when the V-major kernel does not import, or the variable holds
  anything else, with a WARNING): gathers the batch's states from the pool (``[slots, HV, V, K]``),
  hands the kernel a dense K-major copy ``[N, HV, K, V]`` with the indices ``0..N-1`` (a negative
  index stays negative: the kernel starts that row from zeros and stores nothing), calls SGLang's
  own ``decode`` on it, and writes the updated states back into the pool V-major.

SGLang's code and sgl-kernel-npu's kernel are unchanged either way.

Why: without speculation (``mtp.enabled=false``, the ``make mtp-off`` lever) the decode step runs
sgl-kernel-npu's Triton kernel ``fused_sigmoid_gating_delta_rule_update_decode_npu``
(``fla/fused_sigmoid_gating_recurrent_decode_optimized.py``, PR #740), which addresses slot
``idx`` at ``idx*HV*K*V + i_hv*K*V + o_k*V + o_v`` (K-major), while SGLang 0.5.23's pool and the
AscendC prefill and verify ops hold the state V-major. With ``V == K == 128`` nothing fails: the
kernel reads and writes the state transposed, and the text is wrong (under Triton's CPU
interpreter through SGLang's decode: relative error 1.25 on the output, 0.61 on the state written
back; patched 3.4e-3 on both, the bf16 state's rounding:
tests/patches/fixes/test_gdn_decode_state_layout.py). Under NEXTN the target's GDN layers never run
this kernel, which is why MTP-on output is right. Why a Triton kernel of our own rather than the
V-major AscendC verify op (``torch.ops.npu.recurrent_gated_delta_rule``, one token per request):
that op always L2-normalises q and k with another formula (``x * rsqrt(sum x^2 + 1e-6)``), takes
bf16 states only, turns a negative (padded) index into an unsigned offset, and cannot run here,
so nothing about it could be proven before the target; the Triton kernel runs under Triton's CPU
interpreter and agrees with the replaced kernel on a K-major copy to 1e-4 (docs/patches.md).

How: applied when ``gdn_triton`` has been imported (see ``hook``). Behaviour probe: SGLang's
``decode`` is run on tiny CPU tensors against a recording stand-in kernel; if it hands the kernel
something other than the pool itself, or the kernel it calls (the name
``fused_sigmoid_gating_delta_rule_update`` in ``gdn_triton``) addresses the state V-major
(``kernels.decode_addressing``, read from its source), the fix is upstream. Drift guard:
0.5.23's signature and source fingerprint of ``TritonGDNKernel.decode``, a kernel that still takes
``initial_state_source``/``initial_state_indices``, and an addressing that reads as K-major (an
unreadable one is drift: transposing for a kernel that no longer needs it would break it). The
route changes neither.
Hot-path cost per GDN layer and step (``decode_traffic``, counted from the kernels' loads and
stores and checked under Triton's interpreter): the in-place route moves the replaced kernel's own
state traffic, 2 x N x HV x V x K x itemsize, plus the token rows (q and k once per tile where the
replaced kernel loads them per V block; q, k, v, a and b read in place where it copies them); the
copy route adds
8 x N x HV x V x K x itemsize (a gather and a transpose copy in, a transpose copy and a scatter
out): for the 35B profile at batch 32 (TP 2: 16 value heads, 128x128 bf16, 30 GDN layers)
128 MiB a layer, 3.75 GiB a step (``hot_path_bytes``). Static shapes, no host sync on both
routes: graph capture keeps working. The decode patch and the GDN contract (``gdn_contract``,
whose start-up report this module's ``apply`` triggers) are documented in docs/patches.md.

Upstream: https://github.com/sgl-project/sglang/pull/34353 (the pull request these patches
follow); sgl-kernel-npu issue #640 (open: "indexes the SSM state pool K-major while the pool is
V-major"), PR #761 (fixes the generic kernel only).
Remove when: the installed decode kernel addresses the state V-major (this patch then reports
``upstream-fixed``), or SGLang's ``TritonGDNKernel.decode`` hands it a K-major state itself.
"""

from __future__ import annotations

import importlib
import os
import sys
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
_bound: Any = None  # what TritonGDNKernel.decode is while this patch is applied
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


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def decode_traffic(
    route: str,
    *,
    batch: int,
    heads: int,
    value_heads: int,
    v: int,
    k: int,
    sizes: Mapping[str, int],
    live: int | None = None,
    stored: int | None = None,
    split_views: bool = False,
) -> dict[str, int]:
    """Bytes one GDN layer's decode step moves, per tensor, from the kernels' loads and stores.

    Both kernels (the replaced K-major one on the copy, the V-major one in place) issue, per
    (request, value head) tile: ``cu_seqlens`` twice, ``a``, ``b``, ``A_log``, ``dt_bias`` once
    each; per V block (``ceil(V / min(next_pow2(V), 64))`` of them) and token: the block's v and
    o, and the block of state read and written (when the index is >= 0). q and k (K elements
    each): the replaced kernel per V block and token, ours once per token. The replaced kernel
    loads the index per V block, ours once per tile. ``batch`` rows (``live`` of them with a
    token, ``stored`` of those with an index >= 0; both default to ``batch``); ``sizes``:
    itemsize per tensor (``state``, ``q``, ``k``, ``v``, ``o``, ``a``, ``b``, ``A_log``,
    ``dt_bias``, ``indices``, ``cu_seqlens``). The copy route adds ``copies``: its four
    state-sized passes over all ``batch`` rows (``hot_path_bytes``), and, with ``split_views``
    (q, k, v, a and b handed as views of SGLang's packed projections, as its decode does),
    ``view_copies``: the replaced wrapper's ``.contiguous()`` of each (read + write); ours reads
    the views in place.
    """
    if route not in ROUTES:
        raise ValueError(f"route {route!r}: one of {', '.join(ROUTES)}")
    live = batch if live is None else live
    stored = live if stored is None else stored
    blocks = _cdiv(v, min(1 << max(v - 1, 0).bit_length(), 64))
    tiles, live_tiles = batch * value_heads, live * value_heads
    plane = v * k * sizes["state"]
    index_loads = blocks if route == COPY else 1
    qk_loads = blocks if route == COPY else 1
    traffic = {
        "state_read": stored * value_heads * plane,
        "state_write": stored * value_heads * plane,
        "q": live_tiles * qk_loads * k * sizes["q"],
        "k": live_tiles * qk_loads * k * sizes["k"],
        "v": live_tiles * v * sizes["v"],
        "o": live_tiles * v * sizes["o"],
        "gating": tiles * (sizes["a"] + sizes["b"] + sizes["A_log"] + sizes["dt_bias"]),
        "indices": tiles * (index_loads * sizes["indices"] + 2 * sizes["cu_seqlens"]),
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
            traffic["view_copies"] = 2 * live * row
    return traffic


def _route_from(environ: Mapping[str, str]) -> tuple[str, str | None]:
    """(route, why the copy route is taken against the setting, or None)."""
    raw = environ.get(ROUTE_ENV, "").strip()
    if raw in ("", IN_PLACE):
        return IN_PLACE, None
    if raw == COPY:
        return COPY, None
    return COPY, f"{ROUTE_ENV}={raw!r} is not one of {', '.join(ROUTES)}"


def _v_major_kernel() -> Callable[..., Any]:
    kernel: Callable[..., Any] = getattr(importlib.import_module(V_MAJOR_MODULE), V_MAJOR_KERNEL)
    return kernel


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


def _kernel(module: Any) -> Any:
    return getattr(module, KERNEL)


def addressing(module: Any) -> kernels.Reading:
    """How the kernel SGLang's decode calls addresses the state, read from its module's source."""
    kernel = _kernel(module)
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
    params = core.parameter_names(_kernel(module))
    if params is not None and not set(KERNEL_PARAMS) <= set(params):
        return f"{KERNEL}: parameters {params} lack {KERNEL_PARAMS} (sgl-kernel-npu changed)"
    reading = addressing(module)
    if reading.verdict != kernels.K_MAJOR:
        return f"the decode kernel's state addressing is {reading.verdict}: {reading.reason}"
    return None


def _rebind(module: Any) -> str:
    global _original, _bound, _route
    cls = getattr(module, CLASS)
    _original = cls.__dict__[METHOD]
    reading = addressing(module)
    route, why = _route_from(os.environ)
    bound: Any = k_major_decode
    if route == IN_PLACE:
        try:
            bound = with_kernel(_original, module, _v_major_kernel())
        except Exception as exc:  # any import failure of torch/triton/the kernel: the copy route
            route, why = COPY, f"{V_MAJOR_MODULE} does not import ({type(exc).__name__}: {exc})"
    _bound, _route = bound, route
    setattr(cls, METHOD, bound)
    if why is not None:
        log(
            "warning",
            "gdn_decode.route_fallback",
            route=COPY,
            reason=why,
            next=f"set {ROUTE_ENV} to {IN_PLACE} (the chart's patches.gdnDecodeRoute) or {COPY}",
        )
    kernel = f"the kernel: {reading.reason}, line {reading.line}"
    if route == IN_PLACE:
        return (
            f"{CLASS}.{METHOD} rebound, route {IN_PLACE}: SGLang's decode calls "
            f"{V_MAJOR_MODULE}.{V_MAJOR_KERNEL} on the V-major pool ({kernel})"
        )
    return (
        f"{CLASS}.{METHOD} wrapped, route {COPY}: the kernel gets a K-major copy of the "
        f"batch's states ({kernel})"
    )


def route() -> str | None:
    """The route this process took (``in-place`` or ``copy``); None while not applied."""
    return _route if active() else None


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
    return cls is not None and _bound is not None and cls.__dict__.get(METHOD) is _bound


def revert() -> None:
    """Put SGLang's decode back and forget the outcome (tests, debugging)."""
    global _original, _bound, _route
    with _once.lock:
        cls = getattr(sys.modules.get(GDN_TRITON), CLASS, None)
        if _original is not None and cls is not None:
            setattr(cls, METHOD, _original)
        _original = _bound = _route = None
        _once.forget()
        core.OUTCOMES.pop(INFO.name, None)
