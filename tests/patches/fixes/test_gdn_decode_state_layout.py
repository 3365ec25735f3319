"""gdn-decode-state-layout through SGLang 0.5.23's own TritonGDNKernel.decode, with the
sgl-kernel-npu decode kernel stand-in (tests/patches/gdn_kernels.py) running under Triton's CPU
interpreter, on a state pool that SGLang's MambaPool allocates in its NPU configuration, against a
float64 reference: unpatched the K-major kernel reads the V-major pool transposed (the bug);
patched it agrees within bf16 tolerance, state written back included."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import yaml

from qwen_npu.patches import core, gdn_contract
from qwen_npu.patches.fixes import gdn_decode_state_layout as patch
from qwen_npu.patches.state import read_state
from tests.patches.gdn_kernels import reference_decode

pytestmark = pytest.mark.sglang

HEADS, VALUE_HEADS, DIM = 1, 2, 16  # V == K, as in Qwen3.5/3.6 (128): a transpose never crashes
BF16_TOLERANCE = 2e-2


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref).norm() / ref.norm())


@pytest.fixture()
def npu_kernel(
    gdn_triton: ModuleType,
    decode_kernels: dict[str, ModuleType],
    fresh: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Any]:
    """gdn_triton bound to the K-major decode stand-in (as on an NPU), the patch re-applied;
    call the fixture's value with "v-major" for the fixed kernel instead."""

    def bind(layout: str = "k-major") -> core.Outcome:
        fresh(patch)
        kernel = decode_kernels[layout].fused_sigmoid_gating_delta_rule_update_decode_npu
        monkeypatch.setattr(gdn_triton, patch.KERNEL, kernel)
        return patch.apply()

    yield bind


def case(seed: int = 0, slots: tuple[int, ...] = (2, 5, 1)) -> dict[str, Any]:
    """One decode step for len(slots) requests on layer 0 of SGLang's pool, random bf16 states."""
    torch.manual_seed(seed)
    pool = gdn_contract.sglang_mamba_pool(
        heads=VALUE_HEADS, v=DIM, k=DIM, ssm_dtype=torch.bfloat16, size=6, draft=None
    )
    states = pool.mamba_cache.temporal[0]  # [slots + 1, HV, V, K], what forward_decode passes
    states.copy_(torch.randn(states.shape) * 0.5)
    n = len(slots)
    return {
        "pool": states,
        "q": torch.randn(1, n, HEADS, DIM).bfloat16(),
        "k": torch.randn(1, n, HEADS, DIM).bfloat16(),
        "v": torch.randn(1, n, VALUE_HEADS, DIM).bfloat16(),
        "a": torch.randn(n, VALUE_HEADS).bfloat16(),
        "b": torch.randn(n, VALUE_HEADS).bfloat16(),
        "A_log": torch.randn(VALUE_HEADS) * 0.5,
        "dt_bias": torch.randn(VALUE_HEADS) * 0.5,
        "cache_indices": torch.tensor(slots, dtype=torch.int32),
    }


def sglang_decode(gdn_triton: ModuleType, c: dict[str, Any]) -> torch.Tensor:
    """SGLang's decode call, as AscendGDNAttnBackend.forward_decode makes it."""
    n = c["q"].shape[1]
    return gdn_triton.TritonGDNKernel().decode(
        c["q"], c["k"], c["v"], c["a"], c["b"],
        A_log=c["A_log"], dt_bias=c["dt_bias"], ssm_states=c["pool"],
        cache_indices=c["cache_indices"], query_start_loc=torch.arange(n + 1, dtype=torch.int32),
    )  # fmt: skip


def expected(c: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(output, math states written back [N, HV, K, V], the pool before) in float64."""
    before = c["pool"].clone()
    idx = c["cache_indices"].long()
    math = before[idx].mT  # the pool is V-major: [.., V, K] holds S^T
    state, out = reference_decode(math, c["q"][0], c["k"][0], c["v"][0], c["A_log"], c["a"],
                                  c["dt_bias"], c["b"])  # fmt: skip
    return out, state, before


def errors(gdn_triton: ModuleType, c: dict[str, Any]) -> tuple[float, float]:
    out_ref, state_ref, _ = expected(c)
    out = sglang_decode(gdn_triton, c)
    written = c["pool"][c["cache_indices"].long()].mT
    return rel(out.reshape(out_ref.shape), out_ref), rel(written, state_ref)


def test_on_this_cpu_sglang_calls_its_own_v_major_kernel(gdn_triton: ModuleType) -> None:
    outcome = core.OUTCOMES[patch.INFO.name]
    assert outcome.state == "upstream-fixed"
    assert patch.addressing(gdn_triton).verdict == "v-major"
    assert not patch.active()


def test_unpatched_the_k_major_kernel_reads_the_pool_transposed(
    gdn_triton: ModuleType, npu_kernel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QWEN_NPU_DISABLE_PATCHES", patch.INFO.name)
    assert npu_kernel().state == "disabled"
    out_err, state_err = errors(gdn_triton, case())
    print(f"unpatched: relative error output {out_err:.3g}, state written back {state_err:.3g}")
    assert out_err > 0.5 and state_err > 0.2  # the bug: wrong, and no error raised


def test_patched_decode_matches_the_reference_state_included(
    gdn_triton: ModuleType, npu_kernel: Any
) -> None:
    outcome = npu_kernel()
    assert outcome.state == "applied" and patch.active()
    assert "K-major copy" in outcome.detail and "o_k[:, None] * V" in outcome.detail
    c = case()
    _, _, before = expected(c)
    out_err, state_err = errors(gdn_triton, c)
    print(f"patched: relative error output {out_err:.3g}, state written back {state_err:.3g}")
    assert out_err < BF16_TOLERANCE and state_err < BF16_TOLERANCE
    untouched = [s for s in range(c["pool"].shape[0]) if s not in (2, 5, 1)]
    assert torch.equal(c["pool"][untouched], before[untouched])  # other slots keep their bytes
    assert c["pool"].is_contiguous()  # still SGLang's V-major tensor


def test_a_negative_index_starts_from_zeros_and_stores_nothing(
    gdn_triton: ModuleType, npu_kernel: Any
) -> None:
    assert npu_kernel().state == "applied"
    c = case(seed=1, slots=(3, -1))
    before = c["pool"].clone()
    out = sglang_decode(gdn_triton, c)
    zero = torch.zeros(1, VALUE_HEADS, DIM, DIM)
    _, ref = reference_decode(zero, c["q"][0, 1:], c["k"][0, 1:], c["v"][0, 1:], c["A_log"],
                              c["a"][1:], c["dt_bias"], c["b"][1:])  # fmt: skip
    assert rel(out.reshape(2, VALUE_HEADS, DIM)[1:], ref) < BF16_TOLERANCE
    keep = [s for s in range(c["pool"].shape[0]) if s != 3]
    assert torch.equal(c["pool"][keep], before[keep])


def test_a_fixed_kernel_is_upstream_fixed(npu_kernel: Any) -> None:
    outcome = npu_kernel("v-major")
    assert outcome.state == "upstream-fixed" and not patch.active()


def test_sglang_handing_over_a_copy_is_upstream_fixed(
    gdn_triton: ModuleType, npu_kernel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    method = gdn_triton.TritonGDNKernel.__dict__["decode"]

    def fixed_upstream(self: Any, *args: Any, ssm_states: Any, **kwargs: Any) -> Any:
        return method(self, *args, ssm_states=ssm_states.mT.contiguous(), **kwargs)

    monkeypatch.setattr(gdn_triton.TritonGDNKernel, "decode", fixed_upstream)
    assert npu_kernel().state == "upstream-fixed"


def test_drifted_decode_is_not_patched(npu_kernel: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(patch, "PINS", (replace(patch.PINS[0], fingerprint="f" * 64),))
    outcome = npu_kernel()
    assert outcome.state == "drifted" and not patch.active()
    assert "TritonGDNKernel.decode: source fingerprint" in outcome.detail


def test_a_kernel_whose_addressing_cannot_be_read_is_drift(
    gdn_triton: ModuleType, fresh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh(patch)
    opaque = eval("lambda initial_state_source=None, initial_state_indices=None, **kw: None")
    monkeypatch.setattr(gdn_triton, patch.KERNEL, opaque)
    outcome = patch.apply()
    assert outcome.state == "drifted" and "addressing is unknown" in outcome.detail


def test_a_kernel_without_the_state_parameters_is_drift(
    gdn_triton: ModuleType, decode_kernels: dict[str, ModuleType], fresh: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    fresh(patch)

    def renamed(*, h0: Any = None, **kwargs: Any) -> None:
        return None

    monkeypatch.setattr(gdn_triton, patch.KERNEL, renamed)
    outcome = patch.apply()
    assert outcome.state == "drifted" and "lack" in outcome.detail


def test_the_wrapper_has_static_shapes_and_no_host_sync(
    gdn_triton: ModuleType, npu_kernel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Graph capture: run the wrapper under FakeTensorMode (no data: any .item(), nonzero() or
    data-dependent shape raises) with a kernel that only checks what it is handed."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert npu_kernel().state == "applied"
    handed: list[tuple[int, ...]] = []

    def kernel_shape_only(**kwargs: Any) -> Any:
        handed.append(tuple(kwargs["initial_state_source"].shape))
        assert kwargs["initial_state_source"].is_contiguous()
        return kwargs["v"].new_empty(kwargs["v"].shape)

    monkeypatch.setattr(gdn_triton, patch.KERNEL, kernel_shape_only)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        c = {key: mode.from_tensor(t) for key, t in case().items()}
        sglang_decode(gdn_triton, c)
    assert handed == [(3, VALUE_HEADS, DIM, DIM)]  # [N, HV, K, V]: the batch, not the pool


def test_the_hot_path_cost_for_the_35b_profile_at_batch_32(repo: Path) -> None:
    profile = yaml.safe_load(
        (repo / "helm/qwen-npu/profiles/qwen3.5-35b-a3b-w8a8.yaml").read_text()
    )
    heads = profile["model"]["linearNumValueHeads"] // profile["engine"]["tpSize"]
    gdn_layers = 40 - 40 // 4  # 40 layers, every 4th full attention (FACTS: model config fields)
    moved = patch.hot_path_bytes(32, heads, 128, 128, 2, gdn_layers)
    assert (heads, gdn_layers) == (16, 30)
    assert moved == 4_026_531_840  # 3.75 GiB per decode step per rank (128 MiB a layer)


def test_the_first_apply_reports_the_contract_to_the_log_and_state_file(
    npu_kernel: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """What the engine's start-up log shows: the hook applies this patch when gdn_triton is
    imported, and that first apply reports the GDN contract, from the engine's own argv."""
    monkeypatch.setattr(patch, "_contract_reported", False)
    monkeypatch.setenv("QWEN_NPU_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["sglang.launch_server", "--mamba-ssm-dtype", "bfloat16"])
    capsys.readouterr()
    assert npu_kernel().state == "applied"
    lines = [x for x in capsys.readouterr().err.splitlines() if "event=gdn_contract.link" in x]
    assert [x.split("link=")[1].split()[0] for x in lines] == [
        "pool_layout", "prefill_op", "verify_op", "mover", "decode_kernel", "ssm_dtype"
    ]  # fmt: skip
    state = read_state(tmp_path)
    assert state is not None and state["gdn_contract"]["ssm_dtype"]["verdict"] == "pass"
    npu_kernel()  # a later apply in the same process reports nothing more
    assert "event=gdn_contract.link" not in capsys.readouterr().err
