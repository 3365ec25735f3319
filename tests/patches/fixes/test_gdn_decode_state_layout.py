"""gdn-decode-state-layout through SGLang 0.5.23's own TritonGDNKernel.decode, with the
sgl-kernel-npu decode kernel stand-in (tests/patches/gdn_kernels.py) running under Triton's CPU
interpreter, on a state pool that SGLang's MambaPool allocates in its NPU configuration, against a
float64 reference: unpatched the K-major kernel reads the V-major pool transposed (the bug);
patched it agrees within bf16 tolerance, state written back included, on both routes: in place
(qwen-npu's V-major kernel, qwen_npu/patches/kernels/gdn_decode_v_major.py, on the pool itself)
and the copy fallback. The in-place route also agrees with the K-major stand-in run on a K-major
copy (batches 1/32/64, padded and out-of-order slots, graph padding rows, the L2-norm flag, scale),
is graph-capture safe, and moves what ``decode_traffic`` says (bytes counted under the
interpreter)."""

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

from fixtures.triton_interpreter import count_bytes
from qwen_npu.patches import core, gdn_contract
from qwen_npu.patches.fixes import gdn_decode_state_layout as patch
from qwen_npu.patches.state import read_state
from tests.patches.gdn_kernels import reference_decode

pytestmark = pytest.mark.sglang

HEADS, VALUE_HEADS, DIM = 1, 2, 16  # V == K, as in Qwen3.5/3.6 (128): a transpose never crashes
BF16_TOLERANCE = 2e-2
#: In place vs the replaced kernel on a K-major copy: the same fp32 math, reduced in another
#: order, then rounded to bf16 (measured up to 1e-4; docs/patches.md).
KERNEL_AGREEMENT = 1e-3


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref).norm() / ref.norm())


@pytest.fixture()
def npu_kernel(
    gdn_triton: ModuleType,
    decode_kernels: dict[str, ModuleType],
    v_major_kernel: ModuleType,
    fresh: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Any]:
    """gdn_triton bound to the K-major decode stand-in (as on an NPU), the patch re-applied;
    call the fixture's value with "v-major" for the fixed kernel instead, and ``route=`` to set
    QWEN_NPU_GDN_DECODE_ROUTE (unset: the default, in place)."""

    def bind(layout: str = "k-major", route: str | None = None) -> core.Outcome:
        fresh(patch)
        if route is None:
            monkeypatch.delenv(patch.ROUTE_ENV, raising=False)
        else:
            monkeypatch.setenv(patch.ROUTE_ENV, route)
        kernel = decode_kernels[layout].fused_sigmoid_gating_delta_rule_update_decode_npu
        monkeypatch.setattr(gdn_triton, patch.KERNEL, kernel)
        return patch.apply()

    yield bind


def case(
    seed: int = 0, slots: tuple[int, ...] = (2, 5, 1), dim: int = DIM, size: int = 6
) -> dict[str, Any]:
    """One decode step for len(slots) requests on layer 0 of SGLang's pool, random bf16 states."""
    torch.manual_seed(seed)
    pool = gdn_contract.sglang_mamba_pool(
        heads=VALUE_HEADS, v=dim, k=dim, ssm_dtype=torch.bfloat16, size=size, draft=None
    )
    states = pool.mamba_cache.temporal[0]  # [slots + 1, HV, V, K], what forward_decode passes
    states.copy_(torch.randn(states.shape) * 0.5)
    n = len(slots)
    return {
        "pool": states,
        "q": torch.randn(1, n, HEADS, dim).bfloat16(),
        "k": torch.randn(1, n, HEADS, dim).bfloat16(),
        "v": torch.randn(1, n, VALUE_HEADS, dim).bfloat16(),
        "a": torch.randn(n, VALUE_HEADS).bfloat16(),
        "b": torch.randn(n, VALUE_HEADS).bfloat16(),
        "A_log": torch.randn(VALUE_HEADS) * 0.5,
        "dt_bias": torch.randn(VALUE_HEADS) * 0.5,
        "cache_indices": torch.tensor(slots, dtype=torch.int32),
    }


def sglang_decode(
    gdn_triton: ModuleType, c: dict[str, Any], query_start_loc: torch.Tensor | None = None
) -> torch.Tensor:
    """SGLang's decode call, as AscendGDNAttnBackend.forward_decode makes it."""
    n = c["q"].shape[1]
    if query_start_loc is None:
        query_start_loc = torch.arange(n + 1, dtype=torch.int32)
    return gdn_triton.TritonGDNKernel().decode(
        c["q"], c["k"], c["v"], c["a"], c["b"],
        A_log=c["A_log"], dt_bias=c["dt_bias"], ssm_states=c["pool"],
        cache_indices=c["cache_indices"], query_start_loc=query_start_loc,
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


def test_on_this_cpu_sglangs_own_kernel_is_not_taken_for_the_fix(gdn_triton: ModuleType) -> None:
    """Off the NPU SGLang binds its own V-major kernel: the patch says its target is not here
    (never upstream-fixed: that kernel is not the one the patch is about)."""
    outcome = core.OUTCOMES[patch.INFO.name]
    assert outcome.state == "target-missing"
    assert "SGLang's own" in outcome.detail and "sgl-kernel-npu's" in outcome.detail
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


@pytest.mark.parametrize("route", ["in-place", "copy"])
def test_patched_decode_matches_the_reference_state_included(
    gdn_triton: ModuleType, npu_kernel: Any, route: str
) -> None:
    outcome = npu_kernel(route=route)
    assert outcome.state == "applied" and patch.active() and patch.route() == route
    assert f"route {route}" in outcome.detail and "o_k[:, None] * V" in outcome.detail
    if route == "copy":
        assert "K-major copy" in outcome.detail
    c = case()
    _, _, before = expected(c)
    out_err, state_err = errors(gdn_triton, c)
    print(f"patched ({route}): relative error output {out_err:.3g}, state {state_err:.3g}")
    assert out_err < BF16_TOLERANCE and state_err < BF16_TOLERANCE
    untouched = [s for s in range(c["pool"].shape[0]) if s not in (2, 5, 1)]
    assert torch.equal(c["pool"][untouched], before[untouched])  # other slots keep their bytes
    assert c["pool"].is_contiguous()  # still SGLang's V-major tensor


@pytest.mark.parametrize("route", ["in-place", "copy"])
def test_a_negative_index_starts_from_zeros_and_stores_nothing(
    gdn_triton: ModuleType, npu_kernel: Any, route: str
) -> None:
    assert npu_kernel(route=route).state == "applied"
    c = case(seed=1, slots=(3, -1))
    before = c["pool"].clone()
    out = sglang_decode(gdn_triton, c)
    zero = torch.zeros(1, VALUE_HEADS, DIM, DIM)
    _, ref = reference_decode(zero, c["q"][0, 1:], c["k"][0, 1:], c["v"][0, 1:], c["A_log"],
                              c["a"][1:], c["dt_bias"], c["b"][1:])  # fmt: skip
    assert rel(out.reshape(2, VALUE_HEADS, DIM)[1:], ref) < BF16_TOLERANCE
    keep = [s for s in range(c["pool"].shape[0]) if s != 3]
    assert torch.equal(c["pool"][keep], before[keep])


@pytest.mark.parametrize("route", ["in-place", "copy"])
def test_a_fixed_kernel_is_upstream_fixed(npu_kernel: Any, route: str) -> None:
    outcome = npu_kernel("v-major", route=route)
    assert outcome.state == "upstream-fixed" and not patch.active() and patch.route() is None


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
    """Graph capture, copy route: run the wrapper under FakeTensorMode (no data: any .item(),
    nonzero() or data-dependent shape raises) with a kernel that only checks what it is handed."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert npu_kernel(route="copy").state == "applied"
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


# --- the in-place route: the V-major kernel against the replaced one ----------------------------


def slots_for(batch: int, padded: int, seed: int) -> tuple[int, ...]:
    """``batch`` distinct slots (>= 1: slot 0 is SGLang's spare) in a shuffled order, ``padded``
    of them replaced by -1."""
    g = torch.Generator().manual_seed(seed)
    slots = (torch.randperm(batch + 3, generator=g)[:batch] + 1).tolist()
    for i in torch.randperm(batch, generator=g)[:padded].tolist():
        slots[i] = -1
    return tuple(slots)


def k_major_on_a_copy(
    decode_kernels: dict[str, ModuleType], c: dict[str, Any], pool: torch.Tensor, **kw: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The replaced kernel (stand-in) on a K-major copy of ``pool``: (output, the copy after,
    seen V-major)."""
    copy = pool.mT.contiguous()
    out = decode_kernels["k-major"].fused_sigmoid_gating_delta_rule_update_decode_npu(
        initial_state_source=copy, **call_args(c), **kw
    )
    return out.reshape(out.shape[1] if out.dim() == 4 else out.shape[0], VALUE_HEADS, -1), copy.mT


def call_args(c: dict[str, Any], query_start_loc: torch.Tensor | None = None) -> dict[str, Any]:
    n = c["q"].shape[1]
    return dict(
        A_log=c["A_log"], a=c["a"], dt_bias=c["dt_bias"], softplus_beta=1.0,
        softplus_threshold=20.0, q=c["q"], k=c["k"], v=c["v"], b=c["b"],
        initial_state_indices=c["cache_indices"],
        cu_seqlens=torch.arange(n + 1, dtype=torch.int32)
        if query_start_loc is None else query_start_loc,
    )  # fmt: skip


MEASURED: dict[str, dict[str, float]] = {}


@pytest.mark.parametrize(
    ("batch", "padded", "dim"), [(1, 0, DIM), (32, 0, DIM), (64, 7, DIM), (32, 3, 128)]
)
def test_in_place_matches_float64_and_the_k_major_kernel_on_a_copy(
    gdn_triton: ModuleType,
    npu_kernel: Any,
    decode_kernels: dict[str, ModuleType],
    batch: int,
    padded: int,
    dim: int,
) -> None:
    """Through SGLang's decode on its bf16 pool: output and state written back against float64,
    and against the replaced kernel run on a K-major copy of the same pool (the copy route's
    numerics), for out-of-order slots with padded (-1) ones."""
    assert npu_kernel().state == "applied" and patch.route() == "in-place"
    slots = slots_for(batch, padded, seed=batch)
    c = case(seed=batch, slots=slots, dim=dim, size=batch + 4)
    before = c["pool"].clone()
    ref_out, ref_state, _ = expected_padded(c)
    rows = [i for i, s in enumerate(slots) if s >= 0]
    kept = torch.tensor([s for s in slots if s >= 0])
    copy_out, copy_pool = k_major_on_a_copy(decode_kernels, c, before, use_qk_l2norm_in_kernel=True)
    out = sglang_decode(gdn_triton, c).reshape(batch, VALUE_HEADS, dim)
    errs = {
        "output vs float64": rel(out, ref_out),
        "state vs float64": rel(c["pool"][kept].mT, ref_state[rows]),
        # the reference stored as the kernel stores it: bf16, cut the way Triton's interpreter
        # casts fp32 to bf16 (toward zero); what is left is the fp32 math's own error
        "output vs float64 in bf16": rel(out, truncated_bf16(ref_out)),
        "state vs float64 in bf16": rel(c["pool"][kept].mT, truncated_bf16(ref_state[rows])),
        "output vs K-major on a copy": rel(out, copy_out.double()),
        "state vs K-major on a copy": rel(c["pool"][kept], copy_pool[kept].double()),
    }
    MEASURED[f"batch {batch}, {padded} padded, {dim}x{dim}"] = errs
    print(f"in place, batch {batch} ({padded} padded, {dim}x{dim}): "
          + ", ".join(f"{k} {v:.3g}" for k, v in errs.items()))  # fmt: skip
    assert errs["output vs float64"] < BF16_TOLERANCE and errs["state vs float64"] < BF16_TOLERANCE
    assert errs["output vs float64 in bf16"] < KERNEL_AGREEMENT
    assert errs["state vs float64 in bf16"] < KERNEL_AGREEMENT
    assert errs["output vs K-major on a copy"] < KERNEL_AGREEMENT
    assert errs["state vs K-major on a copy"] < KERNEL_AGREEMENT
    untouched = [s for s in range(c["pool"].shape[0]) if s not in set(kept.tolist())]
    assert torch.equal(c["pool"][untouched], before[untouched])
    assert c["pool"].is_contiguous()


def truncated_bf16(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to bf16 toward zero (the interpreter's fp32 -> bf16 cast), as float64."""
    bits = x.float().contiguous().view(torch.int32) & -65536  # keep sign, exponent, 7 bits
    return bits.view(torch.float32).double()


def expected_padded(c: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``expected`` where a negative index starts from zeros."""
    before = c["pool"].clone()
    idx = c["cache_indices"].long()
    math = torch.where((idx >= 0)[:, None, None, None], before[idx.clamp(min=0)].mT, 0)
    state, out = reference_decode(math, c["q"][0], c["k"][0], c["v"][0], c["A_log"], c["a"],
                                  c["dt_bias"], c["b"])  # fmt: skip
    return out, state, before


@pytest.mark.parametrize(
    ("l2norm", "scale"), [(True, None), (False, None), (True, 0.3), (False, 2.0)]
)
def test_the_v_major_kernel_takes_the_l2_norm_flag_and_scale_as_the_replaced_one(
    decode_kernels: dict[str, ModuleType], v_major_kernel: ModuleType, l2norm: bool,
    scale: float | None,
) -> None:  # fmt: skip
    """SGLang's decode always asks for the L2 norm and the default scale; the kernel's other
    settings agree with the replaced kernel too (called directly, the same arguments)."""
    c = case(seed=3, slots=slots_for(8, 2, seed=3), size=12)
    before = c["pool"].clone()
    kw = {"use_qk_l2norm_in_kernel": l2norm, "scale": scale}
    copy_out, copy_pool = k_major_on_a_copy(decode_kernels, c, before, **kw)
    out = v_major_kernel.fused_sigmoid_gating_delta_rule_update_v_major(
        initial_state_source=c["pool"], **call_args(c), **kw
    )
    assert rel(out, copy_out.double()) < KERNEL_AGREEMENT
    assert rel(c["pool"], copy_pool.double()) < KERNEL_AGREEMENT


def test_graph_padding_rows_touch_nothing_on_both_routes(
    gdn_triton: ModuleType, npu_kernel: Any
) -> None:
    """A graph replayed with padding (ascend_hybrid_linear_attn_backend._replay_metadata):
    padded rows get slot 0 and no token (query_start_loc filled with the live count); both routes
    leave slot 0 and the live rows' neighbours alone and agree on the live rows."""
    live, padding = 5, 3
    slots = (*slots_for(live, 0, seed=9), *([0] * padding))
    qsl = torch.arange(live + padding + 1, dtype=torch.int32).clamp(max=live)
    results = {}
    for route in ("in-place", "copy"):
        assert npu_kernel(route=route).state == "applied"
        c = case(seed=9, slots=slots, size=live + 4)
        before = c["pool"].clone()
        out = sglang_decode(gdn_triton, c, qsl).reshape(live + padding, VALUE_HEADS, DIM)
        assert torch.equal(c["pool"][0], before[0])
        results[route] = (out[:live].clone(), c["pool"].clone())
    assert rel(results["in-place"][0], results["copy"][0].double()) < KERNEL_AGREEMENT
    assert rel(results["in-place"][1], results["copy"][1].double()) < KERNEL_AGREEMENT


def test_the_in_place_route_has_static_shapes_and_no_host_sync(
    gdn_triton: ModuleType, npu_kernel: Any, v_major_kernel: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Graph capture, in place: SGLang's decode and the kernel's Python wrapper under
    FakeTensorMode (any data-dependent step raises), the launch recorded instead of run: the
    grid and every argument come from shapes, and the kernel is handed the pool itself."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert npu_kernel().state == "applied" and patch.route() == "in-place"
    launches: list[tuple[tuple[int, ...], dict[str, Any]]] = []

    class Recorder:
        def __getitem__(self, grid: tuple[int, ...]) -> Any:
            return lambda **kwargs: launches.append((grid, kwargs))

    monkeypatch.setattr(v_major_kernel, "_decode_v_major_kernel", Recorder())
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        c = {key: mode.from_tensor(t) for key, t in case().items()}
        out = sglang_decode(gdn_triton, c)
    ((grid, kwargs),) = launches
    assert kwargs["h0_source"] is c["pool"] and kwargs["h0_indices"] is c["cache_indices"]
    assert grid == (min(3 * VALUE_HEADS, v_major_kernel.CPU_PROGRAMS),)
    assert tuple(out.shape) == (3, VALUE_HEADS, DIM)
    assert kwargs["USE_QK_L2NORM_IN_KERNEL"] is True  # SGLang's own argument, passed through


@pytest.mark.parametrize(
    ("setting", "why"),
    [("copy", None), ("bogus", "is not one of in-place, copy"), ("in-place", "does not import")],
)
def test_the_route_setting_and_the_fallback(
    npu_kernel: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    setting: str, why: str | None,
) -> None:  # fmt: skip
    if why == "does not import":
        monkeypatch.setattr(patch, "V_MAJOR_MODULE", "qwen_npu.patches.kernels.no_such_kernel")
    capsys.readouterr()
    outcome = npu_kernel(route=setting)
    assert outcome.state == "applied" and patch.route() == "copy"
    assert "K-major copy" in outcome.detail
    warnings = [x for x in capsys.readouterr().err.splitlines() if "route_fallback" in x]
    if why is None:
        assert warnings == []
    else:
        (line,) = warnings
        assert "level=warning" in line.lower() and why in line and patch.ROUTE_ENV in line


# --- traffic: the model against bytes counted under the interpreter ------------------------------


def sizes_of(c: dict[str, Any]) -> dict[str, int]:
    sizes = {name: c[name].element_size() for name in ("q", "k", "v", "a", "b", "A_log",
                                                       "dt_bias")}  # fmt: skip
    return {**sizes, "state": c["pool"].element_size(), "o": c["q"].element_size(),
            "indices": c["cache_indices"].element_size(), "cu_seqlens": 4}  # fmt: skip


def counted(kernel_bytes: Any, tensors: dict[str, Any]) -> dict[str, int]:
    """The model's keys from a ``count_bytes`` tally (the output is the one unnamed store)."""
    return {
        "state_read": kernel_bytes["state:load"],
        "state_write": kernel_bytes["state:store"],
        **{name: kernel_bytes[f"{name}:load"] for name in ("q", "k", "v")},
        "o": kernel_bytes["other:store"],
        "gating": sum(kernel_bytes[f"{n}:load"] for n in ("a", "b", "A_log", "dt_bias")),
        "indices": kernel_bytes["indices:load"] + kernel_bytes["cu_seqlens:load"],
    }


@pytest.mark.parametrize("route", ["in-place", "copy"])
def test_the_traffic_model_is_what_the_kernels_load_and_store(
    gdn_triton: ModuleType, npu_kernel: Any, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    """Per GDN layer and step, through SGLang's decode: the kernel's loads and stores counted by
    the interpreter (fixtures/triton_interpreter.count_bytes), and on the copy route the torch
    copies around it (a dispatch mode: every non-view op with a batch-of-states-sized operand
    reads and writes it once), equal ``decode_traffic``."""
    from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

    assert npu_kernel(route=route).state == "applied"
    slots = (4, -1, 2, 6, 1)
    c = case(seed=5, slots=slots, dim=32, size=8)
    qsl = torch.arange(len(slots) + 1, dtype=torch.int32)
    plane = VALUE_HEADS * 32 * 32
    copies: list[int] = []

    class Copies(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            result = func(*args, **(kwargs or {}))
            view = any(r.alias_info is not None and not r.alias_info.is_write
                       for r in func._schema.returns)  # fmt: skip
            operands = [*args, *(result if isinstance(result, tuple) else (result,))]
            size = len(slots) * plane
            sized = [t for t in operands if isinstance(t, torch.Tensor) and t.numel() == size]
            if sized and not view:
                copies.append(2 * sized[0].numel() * sized[0].element_size())
            return result

    kernel = getattr(gdn_triton, patch.KERNEL)

    def paused(**kw: Any) -> Any:  # the kernel's launch is counted by count_bytes, not here
        tensors["state"] = kw["initial_state_source"]  # the copy route's gathered copy
        tensors["indices"] = kw["initial_state_indices"]
        with _disable_current_modes():
            return kernel(**kw)

    monkeypatch.setattr(gdn_triton, patch.KERNEL, paused)
    tensors = {"state": c["pool"], "indices": c["cache_indices"], "cu_seqlens": qsl,
               **{n: c[n] for n in ("q", "k", "v", "a", "b", "A_log", "dt_bias")}}  # fmt: skip
    with count_bytes(tensors) as kernel_bytes, Copies():
        sglang_decode(gdn_triton, c, qsl)
    model = patch.decode_traffic(
        route, batch=len(slots), heads=HEADS, value_heads=VALUE_HEADS, v=32, k=32,
        sizes=sizes_of(c), stored=sum(s >= 0 for s in slots),
    )  # fmt: skip
    got = counted(kernel_bytes, tensors)
    # one V block (V = 32): the replaced kernel's per-block index load is one load per tile here,
    # as in the stand-in
    assert got == {key: model[key] for key in got}
    assert kernel_bytes["other:load"] == 0
    assert sum(copies) == model["copies"]
    if route == "in-place":
        assert copies == [] and model["copies"] == 0
    else:
        assert model["copies"] == patch.hot_path_bytes(len(slots), VALUE_HEADS, 32, 32, 2, 1)
        assert len(copies) == 4  # gather, transpose copy, transpose copy back, scatter


# --- issue 41: q and k once per (request, head), the split views read in place, masked lanes 0 --


def test_in_place_loads_q_and_k_once_per_request_and_head_at_two_v_blocks(
    gdn_triton: ModuleType, npu_kernel: Any
) -> None:
    """At V = K = 128 (two V blocks of 64, as Qwen3.5/3.6) the in-place kernel loads each
    request's q and k head once, where the replaced kernel loads them per V block: counted under
    the interpreter, equal to ``decode_traffic``; the state bytes stay the kernel's own."""
    assert npu_kernel(route="in-place").state == "applied"
    slots = (3, -1, 1)
    c = case(seed=7, slots=slots, dim=128, size=5)
    qsl = torch.arange(len(slots) + 1, dtype=torch.int32)
    tensors = {"state": c["pool"], "indices": c["cache_indices"], "cu_seqlens": qsl,
               **{n: c[n] for n in ("q", "k", "v", "a", "b", "A_log", "dt_bias")}}  # fmt: skip
    with count_bytes(tensors) as kernel_bytes:
        sglang_decode(gdn_triton, c, qsl)
    got = counted(kernel_bytes, tensors)
    model = patch.decode_traffic(
        "in-place", batch=len(slots), heads=HEADS, value_heads=VALUE_HEADS, v=128, k=128,
        sizes=sizes_of(c), stored=2,
    )  # fmt: skip
    assert got == {key: model[key] for key in got}
    itemsize = c["q"].element_size()
    assert got["q"] == got["k"] == len(slots) * VALUE_HEADS * 128 * itemsize  # once, not twice
    replaced = patch.decode_traffic(
        "copy", batch=len(slots), heads=HEADS, value_heads=VALUE_HEADS, v=128, k=128,
        sizes=sizes_of(c), stored=2,
    )  # fmt: skip
    assert replaced["q"] == 2 * got["q"] and replaced["k"] == 2 * got["k"]
    assert got["state_read"] == replaced["state_read"] == 2 * VALUE_HEADS * 128 * 128 * 2


def test_split_views_of_q_k_v_a_b_are_read_in_place_without_a_copy(
    v_major_kernel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SGLang hands the decode q, k, v as splits of its packed ``mixed_qkv`` and a, b as splits
    of their projection: the wrapper runs no torch op on any of them (no ``.contiguous()``
    copies: two small kernels per layer and step for a and b alone) and the result equals the
    same call on packed copies, bit for bit."""
    from torch.utils._python_dispatch import TorchDispatchMode

    c = case(seed=11, slots=slots_for(6, 1, seed=11), size=10)
    n = c["q"].shape[1]
    mixed = torch.cat([c["q"], c["k"], c["v"]], dim=2).flatten(2)  # [1, T, (H + H + HV) * D]
    q, k, v = mixed.split([HEADS * DIM, HEADS * DIM, VALUE_HEADS * DIM], dim=-1)
    q, k = q.view(1, n, HEADS, DIM), k.view(1, n, HEADS, DIM)
    v = v.view(1, n, VALUE_HEADS, DIM)
    ba = torch.cat([c["b"], c["a"]], dim=-1)  # [T, 2 * HV]
    b, a = ba.split([VALUE_HEADS, VALUE_HEADS], dim=-1)
    assert not a.is_contiguous() and not b.is_contiguous() and not q.is_contiguous()
    inputs = {id(x.untyped_storage()) for x in (mixed, ba)}
    touched: list[str] = []

    class Ops(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            operands = [*args, *(kwargs or {}).values()]
            reads = func not in (torch.ops.aten.new_empty.default,)  # an allocation reads nothing
            if reads and any(isinstance(t, torch.Tensor) and id(t.untyped_storage()) in inputs
                             for t in operands):  # fmt: skip
                touched.append(str(func))
            return func(*args, **(kwargs or {}))

    class Recorder:  # the launch, recorded (the interpreter's own copies are not the wrapper's)
        def __getitem__(self, grid: tuple[int, ...]) -> Any:
            return lambda **kwargs: launches.append(kwargs)

    launches: list[dict[str, Any]] = []
    pool_views = c["pool"].clone()
    args = call_args(c) | {"q": q, "k": k, "v": v, "a": a, "b": b}
    with monkeypatch.context() as m:
        m.setattr(v_major_kernel, "_decode_v_major_kernel", Recorder())
        with Ops():
            v_major_kernel.fused_sigmoid_gating_delta_rule_update_v_major(
                initial_state_source=pool_views, use_qk_l2norm_in_kernel=True, **args
            )
    assert touched == [], touched
    ((launch,),) = [launches]
    assert all(launch[name] is x for name, x in (("q", q), ("k", k), ("v", v), ("a", a), ("b", b)))
    assert (launch["stride_at"], launch["stride_ah"]) == a.stride()
    out = v_major_kernel.fused_sigmoid_gating_delta_rule_update_v_major(
        initial_state_source=pool_views, use_qk_l2norm_in_kernel=True, **args
    )
    packed = {name: x.contiguous() for name, x in (("q", q), ("k", k), ("v", v), ("a", a),
                                                    ("b", b))}  # fmt: skip
    pool_packed = c["pool"].clone()
    ref = v_major_kernel.fused_sigmoid_gating_delta_rule_update_v_major(
        initial_state_source=pool_packed, use_qk_l2norm_in_kernel=True, **(call_args(c) | packed)
    )
    assert torch.equal(out, ref) and torch.equal(pool_views, pool_packed)


def test_every_masked_load_of_the_v_major_kernel_fills_zero(v_major_kernel: ModuleType) -> None:
    """A K or V that is not a power of two (not its block) must feed zeros, not whatever lies
    past the row, into the norms and sums: every masked ``tl.load`` carries ``other=``."""
    import ast

    tree = ast.parse(Path(v_major_kernel.__file__).read_text())
    loads = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "load"
        and any(kw.arg == "mask" for kw in node.keywords)
    ]
    assert len(loads) >= 4  # q, k, v, the state tile
    missing = [ast.unparse(n) for n in loads if not any(kw.arg == "other" for kw in n.keywords)]
    assert missing == []


def test_a_head_dim_that_is_not_a_power_of_two_matches_float64(
    v_major_kernel: ModuleType,
) -> None:
    """K = V = 24 (blocks of 32: 8 masked lanes): output and state against float64."""
    c = case(seed=13, slots=slots_for(5, 1, seed=13), dim=24, size=9)
    ref_out, ref_state, _ = expected_padded(c)
    slots = c["cache_indices"].tolist()
    rows = [i for i, s in enumerate(slots) if s >= 0]
    kept = torch.tensor([s for s in slots if s >= 0])
    out = v_major_kernel.fused_sigmoid_gating_delta_rule_update_v_major(
        initial_state_source=c["pool"], use_qk_l2norm_in_kernel=True, **call_args(c)
    )
    assert rel(out, truncated_bf16(ref_out)) < KERNEL_AGREEMENT
    assert rel(c["pool"][kept].mT, truncated_bf16(ref_state[rows])) < KERNEL_AGREEMENT
