"""upstream.kernels: the state order a decode kernel addresses, and whether a mover honours strides,
read from kernel sources of each kind (the stand-ins, SGLang's own kernel, edited variants)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from qwen_npu.upstream import kernels as kl
from tests.patches.gdn_kernels import K_MAJOR_ADDRESS, V_MAJOR_ADDRESS, kernel_source
from tools.paths import STUBS

WRAPPER = "fused_sigmoid_gating_delta_rule_update_decode_npu"
MOVER_STUB = STUBS / "sgl_kernel_npu/mamba/mamba_state_update_triton.py"


def test_the_npu_decode_kernel_stand_in_reads_k_major() -> None:
    reading = kl.decode_addressing(kernel_source(), WRAPPER)
    assert reading.verdict == kl.K_MAJOR
    assert "o_k[:, None] * V + o_v[None, :]" in reading.reason and reading.line


def test_the_fixed_kernel_reads_v_major() -> None:
    assert kl.decode_addressing(kernel_source("v-major"), WRAPPER).verdict == kl.V_MAJOR


def test_sglang_s_own_triton_kernel_reads_v_major() -> None:
    # Located, not imported: importing the sglang package costs some 10 s of CPU.
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, (
        "SGLang is not installed: make setup"
    )
    path = (
        Path(spec.submodule_search_locations[0])
        / "kernels/ops/attention/linear/fused_sigmoid_gating_recurrent.py"
    )
    reading = kl.decode_addressing(path.read_text(), "fused_sigmoid_gating_delta_rule_update")
    assert reading.verdict == kl.V_MAJOR and "o_v[None, :] * K + o_k[:, None]" in reading.reason


def test_a_pointer_built_in_two_steps_is_followed() -> None:
    source = kernel_source().replace(
        f"p_h0 = h0_source + idx * HV * K * V + i_hv * K * V + {K_MAJOR_ADDRESS}",
        "base = h0_source + idx * HV * K * V + i_hv * K * V\n"
        f"            p_h0 = base + {K_MAJOR_ADDRESS}",
    )
    assert source != kernel_source()
    assert kl.decode_addressing(source, WRAPPER).verdict == kl.K_MAJOR


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda s: s.replace(WRAPPER, "renamed_wrapper"), "no fused_sigmoid"),
        (
            lambda s: s.replace("h0_source=initial_state_source", "h0_source=None"),
            "passes initial_state_source to no kernel",
        ),
        (
            lambda s: s.replace(K_MAJOR_ADDRESS, "o_k[:, None] * BV + o_v[None, :]"),
            "no state address",
        ),
        (lambda s: s.replace("mask_k = o_k < K", "mask_k = o_k >= 0"), "no state address"),
        (lambda s: s + "\ndef broken(:\n", "does not parse"),
        (
            lambda s: s.replace(
                "b_h = tl.load(p_h0 + t * HV * K * V, mask=mask_h)",
                "b_h = tl.load(h0_source + idx * HV * K * V + i_hv * K * V + "
                f"{V_MAJOR_ADDRESS}, mask=mask_h)",
            ),
            "both ways",
        ),
    ],
    ids=["no-wrapper", "no-launch", "unknown-scale", "unknown-offsets", "syntax", "mixed"],
)
def test_what_cannot_be_read_is_unknown_with_the_reason(edit: object, why: str) -> None:
    source = edit(kernel_source())  # type: ignore[operator]
    assert source != kernel_source()
    reading = kl.decode_addressing(source, WRAPPER)
    assert reading.verdict == kl.UNKNOWN and why in reading.reason


def test_the_mover_stand_in_copies_in_source_order() -> None:
    reading = kl.mover_strides(MOVER_STUB.read_text())
    assert reading.verdict == kl.SOURCE_ORDER and "layer and slot strides" in reading.reason


STRIDE_HONOURING = """
def move_intermediate_cache(ssm_states, intermediate_state_cache, dst, src, steps, h_block_size=2):
    dst_strides = ssm_states.stride()
    dst_layer_stride, dst_size_stride = int(dst_strides[0]), int(dst_strides[1])
    dst_h_stride, dst_v_stride = int(dst_strides[2]), int(dst_strides[3])
    kernel[(1,)](dst_h_stride=dst_h_stride)
"""


@pytest.mark.parametrize(
    ("source", "verdict"),
    [
        (STRIDE_HONOURING, kl.STRIDE_HONOURING),
        (
            STRIDE_HONOURING.replace("int(dst_strides[2])", "ssm_states.stride(-3)"),
            kl.STRIDE_HONOURING,
        ),
        (
            "def move_intermediate_cache(ssm_states, c, d, s, t):\n"
            "    return ssm_states.stride(1)\n",
            kl.SOURCE_ORDER,
        ),
        ("def move_intermediate_cache(ssm_states, c, d, s, t):\n    return None\n", kl.UNKNOWN),
        ("def other(ssm_states):\n    return None\n", kl.UNKNOWN),
        ("def move_intermediate_cache(:\n", kl.UNKNOWN),
    ],
    ids=["unpacked-tuple", "negative-index", "slot-only", "no-stride", "no-function", "syntax"],
)
def test_mover_variants(source: str, verdict: str) -> None:
    assert kl.mover_strides(source).verdict == verdict
