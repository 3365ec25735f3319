"""The GDN state contract: one verdict per link, and each known-bad combination built and seen to
flip its verdict. The pool is SGLang 0.5.23's real MambaPool (NPU configuration); the backend and
kernel sources are the installed ones or files written here of each kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from qwen_npu.patches import gdn_contract as gc
from qwen_npu.patches.registry import GDN_CONTRACT
from qwen_npu.patches.state import read_state
from qwen_npu.upstream.kernels import K_MAJOR
from tools.paths import STUBS

from .gdn_kernels import kernel_source

V, K = gc.POOL_V, gc.POOL_K
MOVER_STUB = STUBS / "sgl_kernel_npu/mamba"


def dense_pool() -> tuple[Any, Any, list[Any], str]:
    return (
        torch.zeros(1, 3, 2, V, K),
        torch.zeros(1, 3, 3, 2, V, K),
        [torch.zeros(1, 3, 5, 8)],
        "x:1",
    )


def transposed_pool() -> tuple[Any, Any, list[Any], str]:
    """SGLang before #39589: the state exposed as a transpose(-1, -2) view of [.., K, V] memory."""
    _, i, c, where = dense_pool()
    return torch.zeros(1, 3, 2, K, V).transpose(-1, -2), i, c, where


def kernels(tmp_path: Path, decode: str | None = "k-major", mover: str | None = None) -> Path:
    """An sgl_kernel_npu folder with the decode kernel of ``decode`` layout and a mover."""
    root = tmp_path / "sgl_kernel_npu"
    (root / "fla").mkdir(parents=True, exist_ok=True)
    (root / "mamba").mkdir(exist_ok=True)
    if decode is not None:
        (root / gc.DECODE_FILE).write_text(kernel_source(decode))
    (root / gc.MOVER_FILE).write_text(
        mover or (MOVER_STUB / "mamba_state_update_triton.py").read_text()
    )
    return root


def sources(tmp_path: Path, **kw: Any) -> gc.Sources:
    base: dict[str, Any] = {
        "build_pool": dense_pool,
        "argv": ["x", "--mamba-ssm-dtype", "bfloat16"],
        "environ": {},
        "decode_patch": "applied",
    }
    base.update(kw)
    if "kernel_dir" not in base:
        base["kernel_dir"] = kernels(tmp_path / "default")
    return gc.Sources(**base)


def verdicts(src: gc.Sources) -> dict[str, str]:
    return {name: v.verdict for name, v in gc.check(src).items()}


@pytest.mark.sglang
def test_sglang_0523_holds_every_link_it_can_show_here(tmp_path: Path) -> None:
    src = sources(tmp_path, build_pool=None)  # SGLang's real MambaPool, NPU branch
    result = gc.check(src)
    assert list(result) == [link.name for link in GDN_CONTRACT]
    assert {n: v.verdict for n, v in result.items()} == dict.fromkeys(result, "pass")
    assert "memory_pool.py:" in result["pool_layout"].evidence
    assert "contiguous, V-major, no transpose view" in result["pool_layout"].evidence
    assert "ascend_gdn_backend.py:" in result["prefill_op"].evidence
    assert "torch.ops.npu.recurrent_gated_delta_rule" in result["verify_op"].evidence
    assert "gdn-decode-state-layout is applied" in result["decode_kernel"].evidence


def test_a_transposed_pool_view_fails_the_pool_and_both_ascendc_ops(tmp_path: Path) -> None:
    assert verdicts(sources(tmp_path))["pool_layout"] == "pass"
    got = verdicts(sources(tmp_path, build_pool=transposed_pool))
    assert got["pool_layout"] == got["prefill_op"] == got["verify_op"] == "fail"


def _backend(tmp_path: Path, call: str) -> Path:
    root = tmp_path / "sglang"
    path = root / gc.BACKEND_FILE
    path.parent.mkdir(parents=True)
    path.write_text(
        f"class {gc.BACKEND_CLASS}:\n    def chunk_gdn(self, q):\n        return {call}(q)\n"
        "    def verify(self, x):\n        return torch.ops.npu.recurrent_gated_delta_rule(x)\n"
    )
    return root


def test_a_triton_chunk_prefill_against_a_v_major_pool_is_the_40398_pair(tmp_path: Path) -> None:
    triton = _backend(tmp_path, "chunk_gated_delta_rule_npu")
    bad = gc.check(sources(tmp_path, sglang_dir=triton))["prefill_op"]
    assert bad.verdict == "fail" and "#40398" in bad.evidence
    ok = verdicts(sources(tmp_path, sglang_dir=triton, build_pool=transposed_pool))
    assert ok["prefill_op"] == "pass"  # a K-major Triton chunk with a K-major pool agrees


STRIDE_MOVER = """
def move_intermediate_cache(ssm_states, cache, dst, src, steps, h_block_size=2):
    s = ssm_states.stride()
    kernel[(1,)](dst_layer_stride=s[0], dst_size_stride=s[1], dst_h_stride=s[2])
"""


def test_a_stride_honouring_mover_fails_only_with_a_transposed_view(tmp_path: Path) -> None:
    root = kernels(tmp_path, mover=STRIDE_MOVER)
    assert verdicts(sources(tmp_path, kernel_dir=root))["mover"] == "pass"
    bad = gc.check(sources(tmp_path, kernel_dir=root, build_pool=transposed_pool))["mover"]
    assert bad.verdict == "fail" and "#748" in bad.evidence
    source_order = verdicts(sources(tmp_path / "b", build_pool=transposed_pool))
    assert source_order["mover"] == "pass"


@pytest.mark.parametrize(
    ("decode", "patch", "verdict"),
    [
        ("k-major", "applied", "pass"),
        ("k-major", "disabled", "fail"),
        ("k-major", "drifted", "fail"),
        ("v-major", "disabled", "pass"),
        (None, "applied", "unknown"),
    ],
)
def test_decode_kernel_against_the_pool(
    tmp_path: Path, decode: str | None, patch: str, verdict: str
) -> None:
    root = kernels(tmp_path, decode=decode)
    result = gc.check(sources(tmp_path, kernel_dir=root, decode_patch=patch))["decode_kernel"]
    assert result.verdict == verdict
    if decode is None:
        assert "no sgl_kernel_npu/fla/fused_sigmoid_gating_recurrent_decode_optimized.py" in (
            result.evidence
        )


def config(tmp_path: Path, dtype: str | None, vl: bool = False) -> Path:
    body: dict[str, Any] = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4}
    if dtype is not None:
        body["mamba_ssm_dtype"] = dtype
    data = (
        {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "text_config": body}
        if vl
        else body
    )
    (tmp_path / "config.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "env", "verdict", "says"),
    [
        ([], {}, "fail", "takes a float32 state only on Ascend950"),
        ([], {"QWEN_NPU_CHIP": "a3"}, "fail", "chip a3"),
        ([], {"QWEN_NPU_CHIP": "ascend950"}, "pass", "float32"),
        (
            ["--speculative-algorithm", "NEXTN"],
            {"QWEN_NPU_CHIP": "ascend950"},
            "fail",
            "bfloat16 state only",
        ),
        (
            ["--mamba-ssm-dtype", "bfloat16", "--speculative-algorithm", "NEXTN"],
            {},
            "pass",
            "from --mamba-ssm-dtype",
        ),
        ([], {"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"}, "pass", "from SGLANG_MAMBA_SSM_DTYPE"),
        ([], {"QWEN_NPU_CHIP": "tpu"}, "unknown", "names no chip"),
        (["--mamba-ssm-dtype", "int8"], {}, "unknown", "is not one of"),
    ],
)
def test_ssm_dtype_resolved_as_sglang_does_against_the_chip(
    tmp_path: Path, argv: list[str], env: dict[str, str], verdict: str, says: str
) -> None:
    model = config(tmp_path, "float32", vl=True)
    result = gc.ssm_dtype(
        sources(tmp_path, argv=["x", "--model-path", str(model), *argv], environ=env)
    )
    assert result.verdict == verdict and says in result.evidence, result.evidence


def test_ssm_dtype_bad_input_is_unknown_naming_what_is_missing(tmp_path: Path) -> None:
    none = gc.ssm_dtype(sources(tmp_path, argv=["x"], environ={}))
    assert none.verdict == "unknown" and "no --model-path" in none.evidence
    missing = gc.ssm_dtype(sources(tmp_path, argv=["x", "--model-path", str(tmp_path / "nope")]))
    assert missing.verdict == "unknown" and "nope" in missing.evidence
    (tmp_path / "config.json").write_text("{not json")
    broken = gc.ssm_dtype(sources(tmp_path, argv=["x", "--model-path", str(tmp_path)]))
    assert broken.verdict == "unknown" and "config.json" in broken.evidence
    assert (
        gc.ssm_dtype(
            sources(tmp_path, argv=["x", "--model-path", str(config(tmp_path, None))])
        ).verdict
        == "fail"
    )


def test_nothing_to_read_is_unknown_never_a_crash(tmp_path: Path) -> None:
    def broken_pool() -> Any:
        raise ImportError("no sglang")

    src = gc.Sources(sglang_dir=tmp_path / "none", kernel_dir=None, build_pool=broken_pool,
                     argv=["x"], environ={}, decode_patch="applied")  # fmt: skip
    result = gc.check(src)
    assert {v.verdict for v in result.values()} == {"unknown"}
    assert "ImportError: no sglang" in result["pool_layout"].evidence
    assert "sgl_kernel_npu is not on sys.path" in result["mover"].evidence
    failing, accepted, _ = gc.strict_problems(result)
    assert failing == ["pool_layout", "prefill_op", "verify_op", "mover"]
    assert accepted == ["decode_kernel", "ssm_dtype"]


def test_report_logs_each_link_and_writes_the_state_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QWEN_NPU_STATE_DIR", str(tmp_path / "state"))
    gc.report(sources(tmp_path, decode_patch="disabled"))
    state = read_state(tmp_path / "state")
    assert state is not None
    assert state["gdn_contract"]["decode_kernel"]["verdict"] == "fail"
    assert set(state["gdn_contract"]) == {link.name for link in GDN_CONTRACT}
    lines = [x for x in capsys.readouterr().err.splitlines() if "event=gdn_contract.link" in x]
    assert len(lines) == len(GDN_CONTRACT)
    assert any("link=decode_kernel verdict=fail" in x and "level=ERROR" in x for x in lines)


def kv_labelled_pool() -> tuple[Any, Any, list[Any], str]:
    """SGLang 0.5.20 under MTP: the temporal state exposed as the [.., HV, K, V] transpose view
    of V-major memory (strides [.., 32, 1, 8] at V = 4, K = 8)."""
    _, i, c, where = dense_pool()
    return torch.zeros(1, 3, 2, V, K).transpose(-1, -2), i, c, where


def test_a_pool_labelled_k_v_is_recognised_and_named_k_major(tmp_path: Path) -> None:
    """Issue 41: the view the candidate report met in 0.5.20 was `unknown` ("unexpected pool
    shape"); it is a transpose view the AscendC ops read transposed, named K-major."""
    temporal = kv_labelled_pool()[0]
    assert list(temporal.stride())[-3:] == [32, 1, 8]
    result = gc.check(sources(tmp_path, build_pool=kv_labelled_pool))
    pool = result["pool_layout"]
    assert pool.verdict == "fail", pool
    assert "temporal [1, 3, 2, 8, 4] strides [192, 64, 32, 1, 8]" in pool.evidence
    assert f"temporal {K_MAJOR} (labelled [.., HV, K, V])" in pool.evidence
    assert result["prefill_op"].verdict == result["verify_op"].verdict == "fail"
    assert f"against a {K_MAJOR} pool" in result["verify_op"].evidence
