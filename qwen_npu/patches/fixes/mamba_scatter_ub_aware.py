"""Patch ``mamba-scatter-ub-aware``: the mamba state scatter gets an ``h_block_size`` that fits.

What: rebinds ``move_intermediate_cache`` in SGLang's Ascend hybrid linear-attention backend module
to a wrapper that asks ``ub_plan.plan(V, K, dtype, num_heads=H)``, from the real
``intermediate_state_cache`` tensor ``(L, S, D, H, V, K)``, for the largest block whose
multi-buffered tile fits the 192 KiB unified buffer and passes it; a caller that passes
``h_block_size`` is left alone. The plan is cached per (H, V, K, dtype), logged and written to the
state file once; a (V, K) plane that alone overflows the UB is warned about once.

Why: ``AscendHybridLinearAttnBackend.update_mamba_state_after_mtp_verify`` calls the kernel twice
without ``h_block_size``; its default of 2 needs 2,097,152 bits of a 1,572,864-bit UB for fp32
128x128 states, so the first request (or graph capture) dies with
``ub overflow, requires 2097152 bits while 1572864 bits available!``.

How: applied when the backend module is imported (``hook``). Drift guard: 0.5.23's signature and
fingerprint of ``update_mamba_state_after_mtp_verify``, and a kernel that still has
``h_block_size``. Behaviour probe: SGLang's method on tiny CPU tensors against a recording kernel;
if it passes ``h_block_size`` itself, the fix is upstream. Effect: the installed kernel's source
must still loop over H in steps of ``h_block_size`` (``upstream.kernels.tiling``), else the patch
is applied without effect (``effect: ignored``; ``patches verify --strict`` fails).

Upstream: https://github.com/sgl-project/sglang/pull/34353 (fix 3, the Ascend backend).
Remove when: SGLang passes ``h_block_size`` itself (this patch then reports ``upstream-fixed``), or
the kernel's default fits every state shape in use. Pin sgl-kernel-npu after 2026-08-25 (PR #748)
for the transposed-state mover fix; this patch does not cover that.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from qwen_npu.hardware import ub_plan
from qwen_npu.log import PartLog
from qwen_npu.patches import core
from qwen_npu.patches.hook import TRIGGERS
from qwen_npu.patches.registry import get_patch
from qwen_npu.patches.state import write_ub_plan
from qwen_npu.upstream import kernels

log = PartLog("patches")

INFO = get_patch("mamba-scatter-ub-aware")
(BACKEND_MODULE,) = TRIGGERS[__name__]
KERNEL = "move_intermediate_cache"
CALLER_CLASS = "AscendHybridLinearAttnBackend"
CALLER = "update_mamba_state_after_mtp_verify"
#: The kernel whose tiling this patch relies on (the build-time check reads its source).
TUNED_KERNEL = (BACKEND_MODULE, KERNEL)

#: What the caller looks like in SGLang 0.5.23 (the drift guard's reference).
PINS = (
    core.Pin(
        BACKEND_MODULE,
        f"{CALLER_CLASS}.{CALLER}",
        (
            "self",
            "last_correct_step_indices",
            "mamba_track_indices",
            "mamba_steps_to_track",
            "model",
            "req_pool_indices",
        ),
        "ab8b1af984692c32144dad48b69f2cd0e4ca32061aef8463006240884a3e1ca1",
    ),
)
_original: Any = None
#: (H, V, K, dtype) -> planned h_block_size, or None when no plan is possible (unknown dtype).
_plans: dict[tuple[Any, ...], int | None] = {}


def _plan_for(cache: Any) -> int | None:
    """The planned block size for this cache tensor (computed, logged and recorded once)."""
    key = (tuple(cache.shape[-3:]), cache.dtype)
    if key in _plans:  # the hot path: two dict lookups per verify step
        return _plans[key]
    shape = tuple(int(n) for n in cache.shape)
    if len(shape) != 6:
        log(
            "warning",
            "ub_plan.unexpected_shape",
            patch=INFO.name,
            cache_shape=list(shape),
            next="the kernel default is used; check the SGLang version (qwen-npu patches verify)",
        )
        _plans[key] = None
        return None
    heads, v, k = shape[3:]
    try:
        result = ub_plan.plan(v, k, cache.dtype, num_heads=heads)
    except ub_plan.UbPlanError as exc:
        log("warning", "ub_plan.unplannable", patch=INFO.name, error=str(exc))
        _plans[key] = None
        return None
    fields = result.as_dict()
    log("info", "ub_plan.computed", patch=INFO.name, cache_shape=list(shape), **fields)
    if result.plane_overflow:
        log(
            "warning",
            "ub_plan.plane_overflow",
            patch=INFO.name,
            cache_shape=list(shape),
            buffered_bytes=result.buffered_bytes,
            ub_bytes=result.ub_bytes,
            next="one (V,K) plane alone overflows the UB; use --mamba-ssm-dtype bfloat16",
        )
    write_ub_plan(fields, cache_shape=shape)
    _plans[key] = result.h_block_size
    return result.h_block_size


def ub_aware_move_intermediate_cache(
    ssm_states: Any,
    intermediate_state_cache: Any,
    dst_indices: Any,
    src_indices: Any,
    last_steps: Any,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """The kernel call with ``h_block_size`` planned from the cache's shape and dtype."""
    if not args and "h_block_size" not in kwargs:
        planned = _plan_for(intermediate_state_cache)
        if planned is not None:
            kwargs["h_block_size"] = planned
    return _original(
        ssm_states, intermediate_state_cache, dst_indices, src_indices, last_steps, *args, **kwargs
    )


def _load() -> Any:
    module = core.loaded(BACKEND_MODULE)
    caller_cls = getattr(module, CALLER_CLASS, None)
    if caller_cls is None or not callable(getattr(caller_cls, CALLER, None)):
        raise core.TargetMissing(f"{BACKEND_MODULE} has no {CALLER_CLASS}.{CALLER}")
    if not callable(getattr(module, KERNEL, None)):
        raise core.TargetMissing(f"{BACKEND_MODULE} has no {KERNEL} (sgl-kernel-npu)")
    return module


def _probe(module: Any) -> core.Probe:
    """Run SGLang's caller on tiny CPU tensors; does it pass ``h_block_size`` by itself?"""
    # lazy: the engine's stack (torch, SGLang), not the base install's
    import torch

    calls: list[dict[str, Any]] = []

    def recorder(*args: Any, **kwargs: Any) -> None:
        calls.append({"nargs": len(args), "kwargs": set(kwargs)})

    cache = torch.zeros((1, 2, 2, 2, 4, 4), dtype=torch.float32)
    caches = SimpleNamespace(
        conv=[torch.zeros((1, 2, 4, 3))],
        temporal=torch.zeros((1, 2, 2, 4, 4)),
        intermediate_ssm=cache,
    )
    backend = SimpleNamespace(
        linear_attn_backend=SimpleNamespace(
            forward_metadata=SimpleNamespace(mamba_cache_indices=torch.tensor([0, 1])),
            req_to_token_pool=SimpleNamespace(
                get_speculative_mamba2_params_all_layers=lambda: caches
            ),
        )
    )
    method = getattr(getattr(module, CALLER_CLASS), CALLER)
    with core.swapped(module, **{KERNEL: recorder, "conv_state_rollback": lambda *a, **k: None}):
        method(backend, torch.tensor([0, 1]), None, None, None)
    if not calls:
        return None
    passes = all(c["nargs"] >= 6 or "h_block_size" in c["kwargs"] for c in calls)
    return "fixed" if passes else "needed"


def _check(module: Any) -> str | None:
    caller = getattr(getattr(module, CALLER_CLASS), CALLER)
    (pin,) = PINS
    mismatch = core.pin_mismatch(pin, caller)
    if mismatch is not None:
        return mismatch
    kernel_params = core.parameter_names(getattr(module, KERNEL))
    if kernel_params is not None and "h_block_size" not in kernel_params:
        return f"{KERNEL}: parameters {kernel_params} have no h_block_size (sgl-kernel-npu changed)"
    return None


def _effect(module: Any) -> tuple[str, str]:
    """Whether the kernel this patch tunes still tiles H by ``h_block_size`` (from its source)."""
    kernel = getattr(module, KERNEL)
    if kernel is ub_aware_move_intermediate_cache:
        kernel = _original
    tiling = kernels.installed_tiling(kernel)
    if tiling.verdict == kernels.TILES:
        return tiling.verdict, f"kernel tiles by h_block_size: {tiling.reason}"
    if tiling.verdict == kernels.IGNORED:
        return tiling.verdict, f"WITHOUT EFFECT: the kernel ignores h_block_size: {tiling.reason}"
    return tiling.verdict, f"kernel tiling unknown: {tiling.reason}"


def _rebind(module: Any) -> str:
    global _original
    _original = _once.rebind(module, KERNEL, ub_aware_move_intermediate_cache)
    return f"{KERNEL} in {CALLER_CLASS}'s module wrapped: h_block_size planned from the UB budget"


_once = core.Once(INFO, load=_load, probe=_probe, check=_check, rebind=_rebind, effect=_effect)
apply, active = _once.apply, _once.active  # once per process: later calls, the first outcome


def revert() -> None:
    """Put SGLang's kernel reference back and forget the outcome and plans (tests, debugging)."""
    _once.revert()
    _plans.clear()
