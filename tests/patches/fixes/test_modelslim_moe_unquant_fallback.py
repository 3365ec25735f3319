"""modelslim-moe-unquant-fallback against SGLang 0.5.23's real ModelSlimConfig and FusedMoE."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
import torch

from qwen_npu.checkpoint.modelslim_desc import moe_layer_is_unquantized
from qwen_npu.patches import core
from qwen_npu.patches.fixes import modelslim_moe_unquant_fallback as patch
from tests.patches.helpers import W_NAMES, description, expert_entries

MTP = "mtp.layers.0.mlp.experts"
UPSTREAM_ERROR = (
    "Unsupported ModelSlim MoE schemes for layer mtp.layers.0.mlp.experts: W13='FLOAT', W2='FLOAT'"
)


#: SGLang's MoE scheme classes build NPU kernels (torch.ops.npu) in __init__; on CPU each is
#: replaced by a stand-in that records its name and weight group. Lookup and errors stay SGLang's.
MOE_SCHEME_CLASSES = (
    "ModelSlimW4A4MXFP4MoE",
    "ModelSlimW4A8MXFP4MoE",
    "ModelSlimW4A4Int4MoE",
    "ModelSlimW4A8Int8MoE",
    "ModelSlimW8A8Int8MoE",
    "ModelSlimMXFP8MoEScheme",
)


@pytest.fixture(autouse=True)
def cpu_moe_schemes(modelslim: ModuleType) -> Iterator[None]:
    def stand_in(name: str) -> type:
        def init(self: Any, quant_config: Any, weight_group: str) -> None:
            self.name, self.weight_group, self.kernel = name, weight_group, f"kernel-{weight_group}"

        return type(name, (), {"__init__": init})

    with contextlib.ExitStack() as stack:
        for name in MOE_SCHEME_CLASSES:
            stack.enter_context(mock.patch.object(modelslim, name, stand_in(name)))
        yield


def moe_layer(fused_moe: ModuleType) -> Any:
    """A real FusedMoE instance (its class is what SGLang checks) with nn.Module state only."""
    layer = fused_moe.FusedMoE.__new__(fused_moe.FusedMoE)
    torch.nn.Module.__init__(layer)
    return layer


def config(modelslim: ModuleType, desc: dict[str, Any]) -> Any:
    return modelslim.ModelSlimConfig(dict(desc))


def test_the_rebinding_happened(modelslim: ModuleType, fused_moe: ModuleType) -> None:
    assert modelslim.ModelSlimConfig.get_quant_method is patch.unquant_fallback_get_quant_method
    assert patch.active()
    assert core.OUTCOMES[patch.INFO.name].state == "applied"


def test_unpatched_sglang_raises_the_upstream_error_verbatim(
    modelslim: ModuleType, fused_moe: ModuleType, fresh: Any
) -> None:
    fresh(patch)
    assert not patch.active()
    cfg = config(modelslim, description(mtp=expert_entries(MTP, "FLOAT")))
    with pytest.raises(ValueError) as info:
        cfg.get_quant_method(moe_layer(fused_moe), MTP)
    assert str(info.value) == UPSTREAM_ERROR


def test_patched_all_float_layer_falls_back_to_unquantized(
    modelslim: ModuleType, fused_moe: ModuleType
) -> None:
    cfg = config(modelslim, description(mtp=expert_entries(MTP, "FLOAT")))
    assert cfg.get_quant_method(moe_layer(fused_moe), MTP) is None


def test_quantized_layer_still_gets_sglangs_modelslim_method(
    modelslim: ModuleType, fused_moe: ModuleType
) -> None:
    cfg = config(modelslim, description())
    layer = moe_layer(fused_moe)
    method = cfg.get_quant_method(layer, "model.layers.0.mlp.experts")
    assert isinstance(method, modelslim.ModelSlimFusedMoEMethod)
    assert layer.w13_scheme.name == "ModelSlimW8A8Int8MoE"
    assert (layer.w13_scheme.weight_group, layer.w2_scheme.weight_group) == ("w13", "w2")
    assert layer.w13_kernel == "kernel-w13"


@pytest.mark.parametrize(
    ("entries", "message_start"),
    [
        pytest.param({}, "Missing ModelSlim MoE quantization description", id="missing"),
        pytest.param(
            expert_entries(MTP, ("FLOAT", "W8A8_DYNAMIC", "FLOAT")),
            "Mismatched ModelSlim quantization for W13",
            id="mixed-within-w13",
        ),
        pytest.param(
            expert_entries(MTP, ("FLOAT", "FLOAT", "W8A8_DYNAMIC")),
            "Unsupported ModelSlim MoE schemes for layer mtp.layers.0.mlp.experts: "
            "W13='FLOAT', W2='W8A8_DYNAMIC'",
            id="w13-vs-w2",
        ),
        pytest.param(
            expert_entries(MTP, "W8A8"),
            "Unsupported ModelSlim MoE schemes for layer mtp.layers.0.mlp.experts: "
            "W13='W8A8', W2='W8A8'",
            id="unsupported-static-w8a8",
        ),
        pytest.param(
            {**expert_entries(MTP, "FLOAT"), f"{MTP}.1.up_proj.weight": "W8A8_DYNAMIC"},
            "Unsupported ModelSlim MoE schemes for layer mtp.layers.0.mlp.experts: "
            "W13='FLOAT', W2='FLOAT'",
            id="float-expert0-quantized-expert1",
        ),
        pytest.param(
            {f"{MTP}.0.gate_proj.weight": "FLOAT", f"{MTP}.0.down_proj.weight": "FLOAT"},
            UPSTREAM_ERROR,
            id="up-missing",
        ),
    ],
)
def test_failure_cases_still_raise_under_the_patch(
    modelslim: ModuleType, fused_moe: ModuleType, entries: dict[str, str], message_start: str
) -> None:
    cfg = config(modelslim, description(mtp=entries))
    with pytest.raises(ValueError) as info:
        cfg.get_quant_method(moe_layer(fused_moe), MTP)
    assert str(info.value).startswith(message_start)


@pytest.mark.parametrize(
    "entries",
    [
        pytest.param(expert_entries(MTP, ("FLOAT", "W8A8_DYNAMIC", "FLOAT")), id="mixed"),
        pytest.param(expert_entries(MTP, ("FLOAT", "FLOAT", "W8A8_DYNAMIC")), id="w13-vs-w2"),
        pytest.param(expert_entries(MTP, "W8A8"), id="unsupported"),
        pytest.param(expert_entries(MTP, "FLOAT"), id="all-float"),
    ],
)
def test_preflight_analysis_gives_sglangs_exact_messages(
    modelslim: ModuleType, fused_moe: ModuleType, fresh: Any, entries: dict[str, str]
) -> None:
    """modelslim_desc (used by the preflight) says what unpatched SGLang says, word for word."""
    fresh(patch)
    desc = description(mtp=entries)
    with pytest.raises(ValueError) as sglang_error:
        config(modelslim, desc).get_quant_method(moe_layer(fused_moe), MTP)
    if str(sglang_error.value) == UPSTREAM_ERROR:
        assert moe_layer_is_unquantized(desc, MTP) is True  # the case the patch fixes
        return
    with pytest.raises(ValueError) as ours:
        moe_layer_is_unquantized(desc, MTP)
    assert str(ours.value) == str(sglang_error.value)


def test_missing_layer_message_is_sglangs(
    modelslim: ModuleType, fused_moe: ModuleType, fresh: Any
) -> None:
    fresh(patch)
    desc = description()
    with pytest.raises(ValueError) as sglang_error:
        config(modelslim, desc).get_quant_method(moe_layer(fused_moe), MTP)
    with pytest.raises(ValueError) as ours:
        moe_layer_is_unquantized(desc, MTP)
    assert str(ours.value) == str(sglang_error.value)
    assert str(ours.value).startswith("Missing ModelSlim MoE quantization description for layer")


@pytest.mark.parametrize(
    ("entries", "prefix"),
    [
        pytest.param(expert_entries(MTP, "FLOAT", names=W_NAMES), MTP, id="w1-w3-w2"),
        pytest.param(
            expert_entries("language_model." + MTP, "FLOAT"), MTP, id="language_model-in-file"
        ),
        pytest.param(
            expert_entries(MTP, "FLOAT"), "language_model." + MTP, id="language_model-in-prefix"
        ),
        pytest.param(
            expert_entries("mtp.layers.0.block_sparse_moe.experts", "FLOAT"),
            MTP,
            id="block_sparse_moe",
        ),
        pytest.param(
            expert_entries("language_model.mtp.layers.0.block_sparse_moe.experts", "FLOAT"),
            MTP,
            id="language_model-and-block_sparse_moe",
        ),
    ],
)
def test_naming_conventions_and_prefix_candidates(
    modelslim: ModuleType,
    fused_moe: ModuleType,
    fresh: Any,
    entries: dict[str, str],
    prefix: str,
) -> None:
    desc = description(mtp=entries)
    fresh(patch)
    with pytest.raises(ValueError, match="W13='FLOAT', W2='FLOAT'"):
        config(modelslim, desc).get_quant_method(moe_layer(fused_moe), prefix)
    assert patch.apply().state == "applied"
    assert config(modelslim, desc).get_quant_method(moe_layer(fused_moe), prefix) is None


def test_non_moe_layers_go_to_sglang_unchanged(modelslim: ModuleType) -> None:
    cfg = config(modelslim, description())
    with mock.patch.object(patch, "moe_all_float") as decision:
        assert cfg.get_quant_method(torch.nn.Identity(), "model.norm") is None
    decision.assert_not_called()


def test_the_decision_is_the_patch_collaborator(
    modelslim: ModuleType, fused_moe: ModuleType
) -> None:
    cfg = config(modelslim, description())
    with mock.patch.object(patch, "moe_all_float", return_value=True) as decision:
        assert cfg.get_quant_method(moe_layer(fused_moe), "model.layers.0.mlp.experts") is None
    decision.assert_called_once_with(cfg.quant_description, "model.layers.0.mlp.experts")


def test_disabled_leaves_sglang_untouched(
    modelslim: ModuleType, fused_moe: ModuleType, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh(patch)
    monkeypatch.setenv("QWEN_NPU_DISABLE_PATCHES", f"other,{patch.INFO.name}")
    assert patch.apply().state == "disabled"
    assert not patch.active()
    cfg = config(modelslim, description(mtp=expert_entries(MTP, "FLOAT")))
    with pytest.raises(ValueError, match="W13='FLOAT'"):
        cfg.get_quant_method(moe_layer(fused_moe), MTP)


def test_drifted_target_is_not_patched(
    modelslim: ModuleType, fused_moe: ModuleType, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh(patch)
    quant_method, moe_scheme = patch.PINS
    monkeypatch.setattr(patch, "PINS", (quant_method, replace(moe_scheme, fingerprint="0" * 64)))
    outcome = patch.apply()
    assert outcome.state == "drifted"
    assert "ModelSlimConfig.get_moe_scheme: source fingerprint" in outcome.detail
    assert not patch.active()


def test_upstream_fix_is_detected_by_behaviour(
    modelslim: ModuleType, fused_moe: ModuleType, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh(patch)
    original = modelslim.ModelSlimConfig.get_quant_method

    def fixed_upstream(self: Any, layer: Any, prefix: str) -> Any:
        if isinstance(layer, fused_moe.FusedMoE) and self.is_layer_skipped(prefix + ".0.gate_proj"):
            return None
        return original(self, layer, prefix)

    monkeypatch.setattr(modelslim.ModelSlimConfig, "get_quant_method", fixed_upstream)
    assert patch.apply().state == "upstream-fixed"
    assert modelslim.ModelSlimConfig.get_quant_method is fixed_upstream
