"""Verdicts on synthetic checkpoints of every Qwen3.5/3.6 size, and each blocking finding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.checkpoints import SIZES, Schemes, write_checkpoint
from qwen_npu.preflight import Options, run_preflight
from qwen_npu.preflight.rules import READY, READY_WITH_PATCHES, WOULD_FAIL, Report

ALL_THREE = {"modelslim-moe-unquant-fallback", "mtp-modelslim-unquant", "mamba-scatter-ub-aware"}


def codes(report: Report, severity: str = "blocking") -> set[str]:
    return {f.code for f in report.findings if f.severity == severity}


def run(path: Path, env: dict[str, str] | None = None, **options: object) -> Report:
    """Preflight on Ascend950 by default: the checkpoints' own float32 state is one its prefill op
    takes, so the patches' rules show at fp32 (on 910B/A3 it blocks: test_ssm_state.py)."""
    options = {"chip": "ascend950", **options}
    return run_preflight(path, Options(**options), environ=env or {})  # type: ignore[arg-type]


@pytest.mark.parametrize("size", ["27B", "35B-A3B", "122B-A10B"])
def test_every_size_is_ready_with_patches(tmp_path: Path, size: str) -> None:
    report = run(write_checkpoint(tmp_path / size, size))
    assert report.verdict == READY_WITH_PATCHES, [f.message for f in report.findings]
    assert report.exit_code == 0
    moe = SIZES[size]["num_experts"] > 0
    # The dense 27B's draft has no fused MoE: it never needs the MoE fallback.
    expected = ALL_THREE if moe else ALL_THREE - {"modelslim-moe-unquant-fallback"}
    assert set(report.quant.needed) == expected
    assert report.quant.mtp_all_float is True
    assert report.memory.fits and report.chosen.feasible


@pytest.mark.slow  # 280k description keys: make test runs it, test-fast does not
def test_397b_vl_needs_eight_npus(ckpt_397b: Path) -> None:
    report = run(ckpt_397b)
    assert report.verdict == READY_WITH_PATCHES
    assert (report.tp, report.tp_source) == (8, "auto")
    assert report.config.is_vl and report.config.num_experts == 512
    assert report.quant.moe_layers_checked == 61  # 60 layers and the MTP layer
    assert report.quant.moe_unquantized_layers == ["mtp.layers.0.mlp.experts"]
    assert not report.memory_by_tp[4].fits


def test_upstream_checkpoint_ready_with_patches_then_fails_without(ckpt_35b: Path) -> None:
    report = run(ckpt_35b, tp=2)
    assert report.verdict == READY_WITH_PATCHES
    assert report.quant.parts["mtp"] == {"FLOAT": report.quant.parts["mtp"]["FLOAT"]}
    assert report.quant.parts["routed_experts"] == {"W8A8_DYNAMIC": 40 * 256 * 3}
    env = {"QWEN_NPU_DISABLE_PATCHES": "all"}
    failed = run(ckpt_35b, env, tp=2)
    assert failed.verdict == WOULD_FAIL and failed.exit_code == 1
    blocking = [f for f in failed.findings if f.severity == "blocking"]
    assert {f.code for f in blocking} == {"patch-disabled"}
    named = {key for f in blocking for key in f.keys}
    assert named == ALL_THREE
    assert any("mtp.layers.0.mlp.experts" in f.message for f in blocking)


def test_only_the_ub_patch_disabled_fails_on_the_first_request(ckpt_35b: Path) -> None:
    report = run(ckpt_35b, {"QWEN_NPU_DISABLE_PATCHES": "mamba-scatter-ub-aware"}, tp=2)
    assert report.verdict == WOULD_FAIL
    (finding,) = [f for f in report.findings if f.severity == "blocking"]
    assert finding.keys == ("mamba-scatter-ub-aware",) and "ub overflow" in finding.message


def test_draft_patch_disabled_alone_still_starts_with_a_warning(ckpt_35b: Path) -> None:
    report = run(ckpt_35b, {"QWEN_NPU_DISABLE_PATCHES": " mtp-modelslim-unquant , typo-patch"})
    assert report.verdict == READY_WITH_PATCHES
    assert codes(report, "warning") >= {"patch-disabled", "patch-name-unknown"}


def test_moe_fallback_disabled_alone_is_harmless_with_the_draft_patch(ckpt_35b: Path) -> None:
    report = run(ckpt_35b, {"QWEN_NPU_DISABLE_PATCHES": "modelslim-moe-unquant-fallback"})
    assert report.verdict == READY_WITH_PATCHES and not codes(report)


def test_mtp_off_needs_no_patch(ckpt_35b: Path) -> None:
    report = run(ckpt_35b, {"QWEN_NPU_DISABLE_PATCHES": "all"}, mtp=False, tp=2)
    assert report.verdict == READY and report.quant.needed == {}
    assert report.chart_values["mtp.enabled"] is False and report.command is None
    assert report.memory.loaded_bytes == report.memory.total_bytes - report.memory.mtp_bytes


def test_mixed_w13_schemes_fail_with_the_layer(tmp_path: Path) -> None:
    key = "model.layers.7.mlp.experts.0.up_proj.weight"
    path = write_checkpoint(tmp_path / "c", schemes=Schemes(overrides={key: "FLOAT"}))
    report = run(path)
    assert report.verdict == WOULD_FAIL
    (finding,) = [f for f in report.findings if f.code == "moe-scheme-mismatch"]
    assert finding.keys == ("model.layers.7.mlp.experts",)
    assert "Mismatched ModelSlim quantization for W13" in finding.message


def test_unsupported_moe_scheme(tmp_path: Path) -> None:
    # Static W8A8 has a linear method in SGLang 0.5.23 but no fused-MoE method.
    path = write_checkpoint(tmp_path / "c", schemes=Schemes(experts="W8A8"))
    report = run(path)
    assert codes(report) == {"moe-scheme-unsupported"}
    (finding,) = [f for f in report.findings if f.code == "moe-scheme-unsupported"]
    assert finding.key_count == 40 and "W13='W8A8', W2='W8A8'" in finding.message


def test_unknown_scheme_names_the_exact_keys(tmp_path: Path) -> None:
    keys = [
        "model.layers.3.self_attn.o_proj.weight",
        "model.layers.3.self_attn.o_proj.weight_scale",
    ]
    path = write_checkpoint(tmp_path / "c", schemes=Schemes(overrides=dict.fromkeys(keys, "W2A16")))
    report = run(path)
    (finding,) = [f for f in report.findings if f.code == "scheme-unknown"]
    assert finding.severity == "blocking" and set(finding.keys) == set(keys)
    assert "W2A16" in finding.message


def test_missing_moe_entries(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "c")
    desc = path / "quant_model_description.json"
    desc.write_text(
        desc.read_text().replace('"model.layers.5.mlp.experts.0.down_proj.weight"', '"x"')
    )
    report = run(path)
    (finding,) = [f for f in report.findings if f.code == "moe-scheme-missing"]
    assert finding.keys == ("model.layers.5.mlp.experts",)


def test_quantized_mtp_needs_no_draft_patch(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "c", schemes=Schemes(mtp="W8A8_DYNAMIC"))
    report = run(path, {"QWEN_NPU_DISABLE_PATCHES": "mtp-modelslim-unquant"})
    assert report.quant.mtp_all_float is False
    assert set(report.quant.needed) == {"mamba-scatter-ub-aware"}
    assert report.verdict == READY_WITH_PATCHES


@pytest.mark.parametrize(
    ("tp", "bad"), [(3, "linear_num_value_heads"), (32, "linear_num_key_heads")]
)
def test_tp_that_does_not_divide_the_heads(ckpt_35b: Path, tp: int, bad: str) -> None:
    report = run(ckpt_35b, tp=tp)
    assert report.verdict == WOULD_FAIL and report.tp_source == "flag"
    messages = [f.message for f in report.findings if f.code == "tp-indivisible"]
    assert any(bad in m for m in messages)
    assert all("Feasible --tp-size values: 1, 2, 4, 8, 16" in m for m in messages)


def test_kv_heads_fewer_than_ranks_must_divide_tp(tmp_path: Path) -> None:
    path = write_checkpoint(
        tmp_path / "c",
        "27B",
        config_overrides={"num_key_value_heads": 3, "num_attention_heads": 24},
    )
    report = run(path, tp=4)
    assert any("num_key_value_heads=3" in f.message for f in report.findings)
    assert run(path, tp=1).chosen.feasible


def test_memory_overflow(ckpt_35b: Path) -> None:
    report = run(ckpt_35b, tp=1, npu_memory_gb=32)
    assert report.verdict == WOULD_FAIL
    (finding,) = [f for f in report.findings if f.code == "memory-overflow"]
    assert "Use --tp-size 2" in finding.message
    assert not report.memory.fits and report.memory.per_npu_bytes > report.memory.budget_bytes


def test_auto_tp_picks_the_smallest_that_fits(ckpt_35b: Path) -> None:
    assert run(ckpt_35b, npu_memory_gb=32).tp == 2
    assert run(ckpt_35b).tp == 1


def test_bf16_ssm_state_plans_h2_and_needs_no_ub_patch(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "c", "35B-A3B", vl=True, ssm_dtype="bfloat16")
    report = run(path, {"QWEN_NPU_DISABLE_PATCHES": "mamba-scatter-ub-aware"}, tp=2)
    assert report.config.mamba_ssm_dtype == "bfloat16"
    assert report.chosen.ub is not None and report.chosen.ub.h_block_size == 2
    assert "mamba-scatter-ub-aware" not in report.quant.needed
    assert report.verdict == READY_WITH_PATCHES


def test_ssm_flag_and_env_override_the_config(ckpt_35b: Path) -> None:
    by_env = run(ckpt_35b, {"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"}, tp=2)
    assert by_env.chosen.ub is not None and by_env.chosen.ub.h_block_size == 2
    by_flag = run(ckpt_35b, {"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"}, tp=2, mamba_ssm_dtype="float32")
    assert by_flag.chosen.ub is not None and by_flag.chosen.ub.h_block_size == 1
    assert by_flag.config.mamba_ssm_dtype_source == "flag"
    assert by_flag.chart_values["engine.mambaSsmDtype"] == "float32"
    assert by_env.chart_values["engine.mambaSsmDtype"] == "bfloat16"


def test_ub_plan_per_tp_follows_heads_per_rank(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "c", ssm_dtype="bfloat16")
    report = run(path)
    plans = {c.tp: c.ub for c in report.tp_checks}
    assert plans[16] is not None and plans[16].num_heads == 2
    assert all(p is not None and p.h_block_size == 2 and p.fits for p in plans.values())


def test_mtp_requested_without_mtp_layers(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "c", "27B", mtp_layers=0)
    report = run(path)
    assert codes(report) == {"mtp-absent"}
    assert run(path, mtp=False).verdict == READY


def test_missing_files_are_findings(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "c", tokenizer=False)
    (path / "model-00003-of-00008.safetensors").unlink()
    report = run(path)
    assert codes(report) == {"tokenizer-missing", "shards-missing"}
    shards = next(f for f in report.findings if f.code == "shards-missing")
    assert shards.keys == ("model-00003-of-00008.safetensors",)


def test_no_index_and_no_weights(tmp_path: Path) -> None:
    report = run(write_checkpoint(tmp_path / "c", index=False))
    assert codes(report) == {"index-missing"}
    assert report.memory.source == "shapes"


def test_unquantized_checkpoint_has_no_modelslim_flag(tmp_path: Path) -> None:
    report = run(write_checkpoint(tmp_path / "c", "27B", description=False))
    assert not report.quant.quantized and "not-modelslim" in codes(report, "info")
    assert report.verdict == READY_WITH_PATCHES  # the UB patch, for the MTP's state scatter


def test_state_plane_too_big_for_the_ub_at_any_block_size(tmp_path: Path) -> None:
    big = {"linear_value_head_dim": 256, "linear_key_head_dim": 256}
    path = write_checkpoint(tmp_path / "c", "27B", config_overrides=big)
    report = run(path, tp=2)
    assert report.chosen.ub is not None and report.chosen.ub.plane_overflow
    assert codes(report) == {"ub-overflow"}
    assert run(path, tp=2, mtp=False).verdict != WOULD_FAIL  # no MTP, no state scatter


def test_config_without_gdn_fields_skips_the_ub_checks(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "c", "27B")
    config_path = path / "config.json"
    config = json.loads(config_path.read_text())
    del config["linear_num_value_heads"]
    config_path.write_text(json.dumps(config))
    report = run(path)
    assert codes(report, "warning") == {"gdn-fields-missing"}
    assert report.chosen.ub is None and "mamba-scatter-ub-aware" not in report.quant.needed
