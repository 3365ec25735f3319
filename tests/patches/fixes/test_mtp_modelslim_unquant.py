"""mtp-modelslim-unquant against SGLang 0.5.23's real _mtp_quant_config, ModelSlimConfig and
server-argument resolution (the draft quantization inheriting ``--quantization modelslim``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import pytest

from qwen_npu.patches.fixes import mtp_modelslim_unquant as patch
from tests.patches.helpers import description, expert_entries, import_quietly

MTP_FLOAT = {
    **expert_entries("mtp.layers.0.mlp.experts", "FLOAT"),
    "mtp.fc.weight": "FLOAT",
    "mtp.layers.0.self_attn.q_proj.weight": "FLOAT",
}
MTP_QUANTIZED = {
    **expert_entries("mtp.layers.0.mlp.experts", "W8A8_DYNAMIC"),
    "mtp.fc.weight": "FLOAT",
}
#: A tiny Qwen3.5-MoE text config: enough for SGLang's ServerArgs to resolve on CPU.
TINY_CONFIG = {
    "architectures": ["Qwen3_5MoeForCausalLM"],
    "model_type": "qwen3_5_moe_text",
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 128,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "full_attention_interval": 4,
    "linear_num_value_heads": 4,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "mtp_num_hidden_layers": 1,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-qwen35-moe")
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    (folder / "quant_model_description.json").write_text(json.dumps(description(mtp=MTP_FLOAT)))
    return folder


@contextmanager
def engine_context(model_dir: Path, **flags: Any) -> Iterator[Any]:
    """SGLang's own ServerArgs resolution and runtime context, as a scheduler would publish it."""
    from sglang.srt import runtime_context
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(
        model_path=str(model_dir),
        quantization="modelslim",
        speculative_algorithm="NEXTN",
        device="cpu",
        disable_radix_cache=True,
        **flags,
    )
    context = runtime_context.create_context(server_args, role="scheduler")
    with runtime_context.use_context(context):
        yield runtime_context


@pytest.fixture()
def on_npu(mtp_module: ModuleType) -> Iterator[None]:
    """0.5.23's partial NPU branch is taken only when is_npu() is true."""
    with mock.patch.object(mtp_module, "is_npu", return_value=True):
        yield


def modelslim_config(desc: dict[str, Any]) -> Any:
    from sglang.srt.layers.quantization.modelslim.modelslim import ModelSlimConfig

    return ModelSlimConfig(dict(desc))


def test_the_rebinding_happened(mtp_module: ModuleType) -> None:
    assert mtp_module._mtp_quant_config is patch.mtp_quant_config_modelslim_aware
    assert patch.active()


def test_by_name_importer_gets_the_patched_function(mtp_module: ModuleType) -> None:
    """qwen4_exp_mtp does `from qwen3_5_mtp import _mtp_quant_config`: it must see the patch."""
    try:
        qwen4 = import_quietly("sglang.srt.models.qwen4_exp_mtp")
    except ImportError as exc:  # pragma: no cover - the module is part of 0.5.23's wheel
        pytest.fail(f"sglang.srt.models.qwen4_exp_mtp does not import: {exc}")
    assert qwen4._mtp_quant_config is patch.mtp_quant_config_modelslim_aware


def test_inherited_modelslim_draft_quantization_reproduces_the_bug_unpatched(
    mtp_module: ModuleType, model_dir: Path, on_npu: None, fresh: Any
) -> None:
    fresh(patch)
    cfg = modelslim_config(description(mtp=MTP_FLOAT))
    with engine_context(model_dir) as ctx:
        assert ctx.get_model().quantization == "modelslim"
        assert ctx.get_spec().speculative_draft_model_quantization == "modelslim"  # inherited
        assert mtp_module._mtp_quant_config(cfg) is cfg  # the draft would be built W8A8


def test_inherited_modelslim_draft_quantization_patched_builds_bf16_draft(
    mtp_module: ModuleType, model_dir: Path, on_npu: None
) -> None:
    cfg = modelslim_config(description(mtp=MTP_FLOAT))
    with engine_context(model_dir) as ctx:
        assert mtp_module._mtp_quant_config(cfg) is None
        # forward()'s bf16 dispatch overrides need exactly this: no MTP config, quantized target.
        assert ctx.get_model().quantization is not None


def test_quantized_mtp_keeps_its_config(
    mtp_module: ModuleType, model_dir: Path, on_npu: None
) -> None:
    cfg = modelslim_config(description(mtp=MTP_QUANTIZED))
    with engine_context(model_dir):
        assert mtp_module._mtp_quant_config(cfg) is cfg


def test_the_known_workaround_flag_still_works(
    mtp_module: ModuleType, model_dir: Path, on_npu: None
) -> None:
    cfg = modelslim_config(description(mtp=MTP_QUANTIZED))
    with engine_context(model_dir, speculative_draft_model_quantization="unquant") as ctx:
        assert ctx.get_spec().speculative_draft_model_quantization is None
        assert mtp_module._mtp_quant_config(cfg) is None


def test_off_npu_and_other_configs_pass_through(mtp_module: ModuleType) -> None:
    quantized = modelslim_config(description(mtp=MTP_QUANTIZED))
    assert mtp_module._mtp_quant_config(quantized) is quantized
    assert mtp_module._mtp_quant_config(None) is None
    assert mtp_module._mtp_quant_config(modelslim_config(description(mtp=MTP_FLOAT))) is None


def test_description_without_mtp_entries_keeps_the_config(mtp_module: ModuleType) -> None:
    cfg = modelslim_config(description())
    assert mtp_module._mtp_quant_config(cfg) is cfg


def test_the_decision_is_the_patch_collaborator(mtp_module: ModuleType) -> None:
    cfg = modelslim_config(description(mtp=MTP_QUANTIZED))
    with mock.patch.object(patch, "mtp_is_all_float", return_value=True) as decision:
        assert mtp_module._mtp_quant_config(cfg) is None
    decision.assert_called_once_with(cfg.quant_description)


def test_disabled_leaves_sglang_untouched(
    mtp_module: ModuleType, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh(patch)
    monkeypatch.setenv("QWEN_NPU_DISABLE_PATCHES", "all")
    assert patch.apply().state == "disabled"
    cfg = modelslim_config(description(mtp=MTP_FLOAT))
    assert mtp_module._mtp_quant_config(cfg) is cfg


def test_drifted_target_is_not_patched(
    mtp_module: ModuleType, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh(patch)
    monkeypatch.setattr(patch, "PINS", (replace(patch.PINS[0], params=("quant_config", "prefix")),))
    outcome = patch.apply()
    assert outcome.state == "drifted"
    assert "signature" in outcome.detail
    assert not patch.active()


def test_upstream_fix_is_detected_by_behaviour(
    mtp_module: ModuleType, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh(patch)
    original = mtp_module._mtp_quant_config
    sglang_is_npu, sglang_get_spec = mtp_module.is_npu, mtp_module.get_spec

    def fixed_upstream(quant_config: Any) -> Any:
        if quant_config is not None and quant_config.get_name() == "modelslim":
            mtp = {k: v for k, v in quant_config.quant_description.items() if k.startswith("mtp.")}
            if mtp and set(mtp.values()) == {"FLOAT"}:
                return None
        return original(quant_config)

    monkeypatch.setattr(mtp_module, "_mtp_quant_config", fixed_upstream)
    assert patch.apply().state == "upstream-fixed"
    assert mtp_module._mtp_quant_config is fixed_upstream
    # the probe's stand-ins for is_npu/get_spec are gone again
    assert (mtp_module.is_npu, mtp_module.get_spec) == (sglang_is_npu, sglang_get_spec)
