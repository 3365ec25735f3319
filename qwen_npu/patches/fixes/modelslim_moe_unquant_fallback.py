"""Patch ``modelslim-moe-unquant-fallback``: an all-FLOAT fused-MoE layer loads unquantized.

What: wraps ``ModelSlimConfig.get_quant_method``: for a ``FusedMoE`` layer whose gate, up and down
projections are ``FLOAT`` for every expert it returns ``None`` (``FusedMoE`` then builds its
``UnquantizedFusedMoEMethod``); every other call goes to SGLang's method, so missing, mixed and
unsupported schemes still raise SGLang's ``ValueError``.

Why: ModelSlim exports of Qwen3.5/3.6 keep the MTP layer unquantized; SGLang 0.5.23 finds no MoE
scheme called ``FLOAT`` and stops at start-up with ``ValueError: Unsupported ModelSlim MoE schemes
for layer mtp.layers.0.mlp.experts: W13='FLOAT', W2='FLOAT'``.

How: ``modelslim_desc.moe_all_float`` over the config's ``quant_description`` (SGLang's naming
and prefix rules), applied when the ModelSlim module and ``fused_moe_triton`` are imported
(``hook``); drift-guarded by the fingerprints of ``get_quant_method`` and ``get_moe_scheme``; the
behaviour probe hands SGLang's method an all-FLOAT layer.

Upstream: https://github.com/sgl-project/sglang/pull/34353 (fix 1, modelslim.py).
Remove when: SGLang's ``get_quant_method`` returns None for an all-FLOAT FusedMoE layer; this patch
then reports ``upstream-fixed`` and can be deleted with its registry entry and tests.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from qwen_npu.checkpoint.modelslim_desc import moe_all_float
from qwen_npu.log import PartLog
from qwen_npu.patches import core
from qwen_npu.patches.hook import TRIGGERS
from qwen_npu.patches.registry import get_patch

log = PartLog("patches")

INFO = get_patch("modelslim-moe-unquant-fallback")
MODELSLIM_MODULE, FUSED_MOE_MODULE = TRIGGERS[__name__]

#: What the targets look like in SGLang 0.5.23 (the drift guard's reference). The fallback
#: mirrors get_moe_scheme's lookup rules, so a change there is drift too.
PINS = (
    core.Pin(
        MODELSLIM_MODULE,
        "ModelSlimConfig.get_quant_method",
        ("self", "layer", "prefix"),
        "e6b2c9bf1fd95b8ef4e16db702602cb2b9fafcb8d3e150c198aec265f5f54c22",
    ),
    core.Pin(
        MODELSLIM_MODULE,
        "ModelSlimConfig.get_moe_scheme",
        ("self", "layer", "prefix"),
        "f0a1844a4247901eda572dfb19f67692f8a2774a7561551d50fd0b12f78d5218",
    ),
)

_original: Any = None
_fused_moe_cls: Any = None
_logged_prefixes: set[str] = set()


def unquant_fallback_get_quant_method(self: Any, layer: Any, prefix: str) -> Any:
    """``get_quant_method`` with the all-FLOAT fused-MoE fallback in front of SGLang's own."""
    if isinstance(layer, _fused_moe_cls) and moe_all_float(self.quant_description, prefix):
        if prefix not in _logged_prefixes:
            _logged_prefixes.add(prefix)
            log("info", "moe.unquantized_fallback", patch=INFO.name, layer=prefix)
        return None
    return _original(self, layer, prefix)


class _Targets:
    def __init__(self, modelslim: Any, fused_moe: Any) -> None:
        self.config_cls = modelslim.ModelSlimConfig
        self.fused_moe_cls = fused_moe.FusedMoE
        self.logger_name = modelslim.__name__


def _load() -> _Targets:
    modelslim = sys.modules.get(MODELSLIM_MODULE)
    fused_moe = sys.modules.get(FUSED_MOE_MODULE)
    if modelslim is None or fused_moe is None:
        raise core.TargetMissing(f"{MODELSLIM_MODULE} or {FUSED_MOE_MODULE} is not imported")
    for module, attr in ((modelslim, "ModelSlimConfig"), (fused_moe, "FusedMoE")):
        if not hasattr(module, attr):
            raise core.TargetMissing(f"{module.__name__} has no {attr}")
    for attr in ("get_quant_method", "get_moe_scheme"):
        if not callable(getattr(modelslim.ModelSlimConfig, attr, None)):
            raise core.TargetMissing(f"ModelSlimConfig has no {attr}")
    return _Targets(modelslim, fused_moe)


#: A one-layer description whose experts are all FLOAT (the MTP layer of the real checkpoints).
PROBE_PREFIX = "mtp.layers.0.mlp.experts"
PROBE_DESCRIPTION = {
    f"{PROBE_PREFIX}.0.{proj}.weight": "FLOAT" for proj in ("gate_proj", "up_proj", "down_proj")
}


def _probe(t: _Targets) -> core.Probe:
    """Hand SGLang's own method an all-FLOAT FusedMoE layer: None means it is fixed upstream."""
    config = t.config_cls(dict(PROBE_DESCRIPTION))
    layer = t.fused_moe_cls.__new__(t.fused_moe_cls)  # isinstance only; never initialised
    method = t.config_cls.get_quant_method
    if method is unquant_fallback_get_quant_method:
        method = _original
    logger = logging.getLogger(t.logger_name)
    was_disabled, logger.disabled = logger.disabled, True  # its "Unsupported scheme" warning
    try:
        result = method(config, layer, PROBE_PREFIX)
    except ValueError:
        return "needed"
    finally:
        logger.disabled = was_disabled
    return "fixed" if result is None else None


def _check(t: _Targets) -> str | None:
    for pin in PINS:
        attr = pin.qualname.rpartition(".")[2]
        mismatch = core.pin_mismatch(pin, getattr(t.config_cls, attr))
        if mismatch is not None:
            return mismatch
    return None


def _rebind(t: _Targets) -> str:
    global _original, _fused_moe_cls
    _fused_moe_cls = t.fused_moe_cls
    _original = _once.rebind(t.config_cls, "get_quant_method", unquant_fallback_get_quant_method)
    return "ModelSlimConfig.get_quant_method wrapped: all-FLOAT FusedMoE layers load unquantized"


_once = core.Once(INFO, load=_load, probe=_probe, check=_check, rebind=_rebind)
apply, active, revert = _once.apply, _once.active, _once.revert  # revert: tests, debugging
