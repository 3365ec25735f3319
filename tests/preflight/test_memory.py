"""The memory estimate: index sizes when present, shapes otherwise, the MTP's share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.checkpoints import (
    Schemes,
    make_config,
    make_description,
    make_index,
    write_checkpoint,
)
from qwen_npu.checkpoint.model_config import parse_model_config
from qwen_npu.preflight import Options, run_preflight
from qwen_npu.preflight.memory import GIB, shape_bytes
from qwen_npu.preflight.quant import scan_description

# The largest size is a slow test: make test runs it, test-fast keeps the three others.
LARGEST = pytest.param("397B-A17B", marks=pytest.mark.slow)


@pytest.mark.parametrize("size", ["27B", "35B-A3B", "122B-A10B", LARGEST])
@pytest.mark.parametrize(
    "schemes",
    [Schemes(), Schemes(experts="W4A8_DYNAMIC"), Schemes(linear="FLOAT", experts="FLOAT")],
)
def test_shape_estimate_matches_the_checkpoint_size(size: str, schemes: Schemes) -> None:
    raw = make_config(size)
    desc = make_description(raw, schemes)
    on_disk = make_index(raw, desc)["metadata"]["total_size"]
    main, mtp = shape_bytes(parse_model_config(raw, environ={}), scan_description(desc).parts)
    assert main + mtp == pytest.approx(on_disk, rel=0.03)


def test_mtp_share_is_bf16_sized(ckpt_35b: Path) -> None:
    report = run_preflight(ckpt_35b, Options(tp=1), environ={})
    # One full-attention layer with 256 bf16 experts of 3 x 2048 x 512, plus fc and attention.
    experts = 256 * 3 * 2048 * 512 * 2
    assert experts < report.memory.mtp_bytes < experts * 1.1
    assert report.memory.source == "index"
    index = json.loads((ckpt_35b / "model.safetensors.index.json").read_text())
    assert report.memory.total_bytes == index["metadata"]["total_size"]


#: SGLang 0.5.23's Qwen3_5ForCausalLMMTP at TP 1, parameters less embed_tokens and lm_head (the
#: target's replace them once the draft has loaded): measured by building the real module on the
#: meta device in tests/patches/test_sglang_mtp_model.py, which asserts these figures.
SGLANG_LASTING_MTP_BYTES = {
    "27B": 849_398_784,
    "35B-A3B": 1_689_281_536,
    "122B-A10B": 5_047_358_464,
    "397B-A17B": 13_191_136_256,
}


@pytest.mark.parametrize("size", sorted(SGLANG_LASTING_MTP_BYTES))
def test_mtp_share_matches_the_draft_sglang_builds(size: str) -> None:
    """Within 2 % (measured: 0.006 % or better; preflight leaves out the norms and the shared
    expert gate, a few kB)."""
    raw = make_config(size)
    parts = scan_description(make_description(raw)).parts
    _, mtp = shape_bytes(parse_model_config(raw, environ={}), parts)
    real = SGLANG_LASTING_MTP_BYTES[size]
    assert abs(mtp - real) / real < 0.02
    assert mtp <= real  # preflight never counts more than SGLang allocates


def test_per_npu_divides_by_tp_and_budget_uses_fraction(ckpt_35b: Path) -> None:
    one = run_preflight(ckpt_35b, Options(tp=1), environ={}).memory
    four = run_preflight(ckpt_35b, Options(tp=4, mem_fraction_static=0.5), environ={}).memory
    assert four.per_npu_bytes == pytest.approx(one.per_npu_bytes / 4, abs=4)
    assert four.budget_bytes == 32 * GIB


def test_index_without_total_size_falls_back_to_shapes(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "c", "27B")
    index_path = path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    total = index.pop("metadata")["total_size"]
    index_path.write_text(json.dumps(index))
    report = run_preflight(path, Options(), environ={})
    assert report.memory.source == "shapes"
    assert report.memory.total_bytes == pytest.approx(total, rel=0.03)
    assert any(f.code == "index-no-total-size" for f in report.findings)


def test_tight_memory_is_a_warning(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "c", "27B")
    report = run_preflight(path, Options(tp=1, npu_memory_gb=37), environ={})
    assert report.memory.fits and report.memory.tight
    assert [f.code for f in report.findings if f.severity == "warning"] == ["memory-tight"]
