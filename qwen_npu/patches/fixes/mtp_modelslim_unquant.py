"""Patch ``mtp-modelslim-unquant``: an all-FLOAT MTP module is built without the ModelSlim config.

What: wraps ``_mtp_quant_config`` of ``sglang.srt.models.qwen3_5_mtp`` (also used by name by
``qwen4_exp_mtp``): for a ModelSlim quant config whose ``mtp.*`` entries are all ``FLOAT`` it
returns ``None``; anything else goes to SGLang's function (a quantized MTP keeps its config).

Why: SGLang 0.5.23 drops the MTP's quant config on NPU only when
``--speculative-draft-model-quantization`` resolves to None, but it inherits ``--quantization
modelslim``, so the plain command line builds the bf16 draft with the target's W8A8 config (and
fails in the MoE scheme lookup). With ``None`` the draft loads in bf16 and
``Qwen3_5ForCausalLMMTP.forward`` turns on its bf16 dispatch overrides. No extra flag needed.

How: ``modelslim_desc.mtp_is_all_float`` on ``quant_config.quant_description``, applied when
``qwen3_5_mtp`` is imported (``hook``); a module already holding SGLang's function by name is
rebound too. Drift guard: 0.5.23's signature and fingerprint. Behaviour probe: SGLang's function,
as on an NPU with the draft quantization inherited, given an all-FLOAT-MTP ModelSlim config;
``None`` means the fix is upstream.

Upstream: https://github.com/sgl-project/sglang/pull/34353 (fix 2, qwen3_5_mtp.py).
Remove when: SGLang's ``_mtp_quant_config`` returns None for such a config; this patch then
reports ``upstream-fixed`` and can be deleted with its registry entry and tests.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

from qwen_npu.checkpoint.modelslim_desc import mtp_is_all_float
from qwen_npu.log import PartLog
from qwen_npu.patches import core
from qwen_npu.patches.hook import TRIGGERS
from qwen_npu.patches.registry import get_patch

log = PartLog("patches")

INFO = get_patch("mtp-modelslim-unquant")
(MTP_MODULE,) = TRIGGERS[__name__]
#: Modules that import the function by name; rebound too when already imported.
BY_NAME_IMPORTERS = ("sglang.srt.models.qwen4_exp_mtp",)
FUNCTION = "_mtp_quant_config"
MODELSLIM_MODULE = "sglang.srt.layers.quantization.modelslim.modelslim"

#: What the target looks like in SGLang 0.5.23 (the drift guard's reference).
PINS = (
    core.Pin(
        MTP_MODULE,
        FUNCTION,
        ("quant_config",),
        "479d1b446125ae4d93381c042e9e2463a3bc25f54d82fabf74af1e5a73af98a3",
    ),
)

_original: Any = None
_logged = False


def _is_modelslim(quant_config: Any) -> bool:
    get_name = getattr(quant_config, "get_name", None)
    return callable(get_name) and get_name() == "modelslim"


def mtp_quant_config_modelslim_aware(quant_config: Any) -> Any:
    """``_mtp_quant_config`` that drops a ModelSlim config whose MTP entries are all FLOAT."""
    global _logged
    if _is_modelslim(quant_config):
        description = getattr(quant_config, "quant_description", None)
        if isinstance(description, dict) and mtp_is_all_float(description):
            if not _logged:
                _logged = True
                log(
                    "info",
                    "mtp.unquantized",
                    patch=INFO.name,
                    detail="every mtp.* entry is FLOAT; the MTP module is built in bf16",
                )
            return None
    return _original(quant_config)


def _load() -> Any:
    module = core.loaded(MTP_MODULE)
    if not callable(getattr(module, FUNCTION, None)):
        raise core.TargetMissing(f"{MTP_MODULE} has no {FUNCTION}")
    return module


class _ProbeModelSlimConfig:
    """Duck-typed ModelSlim config: W8A8 target, all-FLOAT MTP (the real checkpoints' shape)."""

    is_checkpoint_nvfp4_serialized = False

    def __init__(self) -> None:
        self.quantized_layers: list[str] = []
        self.ignore: list[str] = []
        self.packed_modules_mapping: dict[str, Any] = {}
        self.quant_description = {
            "model_quant_type": "W8A8_DYNAMIC",
            "model.layers.0.mlp.experts.0.gate_proj.weight": "W8A8_DYNAMIC",
            "mtp.layers.0.mlp.experts.0.gate_proj.weight": "FLOAT",
            "mtp.fc.weight": "FLOAT",
        }

    @staticmethod
    def get_name() -> str:
        return "modelslim"


def _probe_config() -> Any:
    """A real ModelSlimConfig when SGLang has loaded it (it has, by the time the MTP module is)."""
    probe = _ProbeModelSlimConfig()
    modelslim = sys.modules.get(MODELSLIM_MODULE)
    config_cls = getattr(modelslim, "ModelSlimConfig", None)
    if config_cls is None:
        return probe
    return config_cls(dict(probe.quant_description))


def _probe(module: Any) -> core.Probe:
    """SGLang's own function, as on an NPU with the draft quantization inherited as modelslim."""
    function = getattr(module, FUNCTION)
    if function is mtp_quant_config_modelslim_aware:
        function = _original
    spec = SimpleNamespace(speculative_draft_model_quantization="modelslim")
    with core.swapped(module, is_npu=lambda: True, get_spec=lambda: spec):
        result = function(_probe_config())
    return "fixed" if result is None else "needed"


def _check(module: Any) -> str | None:
    (pin,) = PINS
    return core.pin_mismatch(pin, getattr(module, FUNCTION))


def _rebind(module: Any) -> str:
    global _original
    _original = _once.rebind(module, FUNCTION, mtp_quant_config_modelslim_aware)
    also = []
    for name in BY_NAME_IMPORTERS:
        importer = sys.modules.get(name)
        if importer is not None and getattr(importer, FUNCTION, None) is _original:
            _once.rebind(importer, FUNCTION, mtp_quant_config_modelslim_aware)
            also.append(name)
    suffix = f" (also in {', '.join(also)})" if also else ""
    return f"{FUNCTION} wrapped: an all-FLOAT ModelSlim MTP is built without quant config{suffix}"


_once = core.Once(INFO, load=_load, probe=_probe, check=_check, rebind=_rebind)
apply, active, revert = _once.apply, _once.active, _once.revert  # revert: tests, debugging
