"""ub_plan: the UB arithmetic and `qwen-npu ub-plan`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from qwen_npu.hardware import ub_plan
from qwen_npu.hardware.ub_plan import UbPlanError, next_pow2, plan


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qwen_npu.cli", "ub-plan", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_fp32_128x128_needs_block_size_one_and_h2_is_the_upstream_overflow() -> None:
    p = plan(128, 128, "float32")
    assert (p.h_block_size, p.tile_bytes, p.buffered_bytes, p.fits) == (1, 65536, 131072, True)
    assert p.headroom_bytes == 196608 - 131072
    # h=2 would need 2 * 2 * 128 * 128 * 4 bytes = 2,097,152 bits: the error in the PR.
    assert 2 * 2 * 128 * 128 * 4 * 8 == 2_097_152 and 196_608 * 8 == 1_572_864


def test_bf16_128x128_gets_two() -> None:
    p = plan(128, 128, "bfloat16")
    assert (p.h_block_size, p.buffered_bytes, p.fits, p.plane_overflow) == (2, 131072, True, False)


def test_plane_that_alone_overflows() -> None:
    p = plan(512, 256, "float32")
    assert (p.h_block_size, p.fits, p.plane_overflow) == (1, False, True)
    assert p.headroom_bytes < 0


@pytest.mark.parametrize(
    ("v", "k", "dtype", "heads", "expected"),
    [
        (64, 64, "bfloat16", None, 8),
        (64, 64, "bfloat16", 2, 2),  # bounded by the heads on this rank
        (64, 64, "bfloat16", 6, 4),  # need not divide: the kernel masks h < H
        (100, 100, "bfloat16", 3, 2),  # padded to 128x128; 2 heads, then 1 masked
        (64, 64, "bfloat16", 12, 8),  # 8 fits the UB, 16 would not
        (100, 100, "float32", None, 1),  # padded to 128x128
        (128, 128, "float16", 1, 1),
        (16, 16, "float32", None, 64),
    ],
)
def test_largest_power_of_two_that_fits_and_does_not_exceed_the_heads(
    v: int, k: int, dtype: str, heads: int | None, expected: int
) -> None:
    p = plan(v, k, dtype, num_heads=heads)
    assert p.h_block_size == expected
    assert p.buffered_bytes <= p.ub_bytes
    bigger = 2 * p.buffered_bytes
    assert bigger > p.ub_bytes or (heads is not None and 2 * expected > heads)


def test_budget_and_buffers_are_parameters() -> None:
    assert plan(128, 128, "float32", buffers=1).h_block_size == 2
    assert plan(128, 128, "float32", ub_bytes=262144 * 2).h_block_size == 4


def test_dtype_spellings() -> None:
    assert plan(128, 128, "torch.bfloat16").dtype == "bfloat16"
    assert plan(128, 128, "fp32").dtype == "float32"
    with pytest.raises(UbPlanError, match="float64: not a mamba state dtype"):
        plan(128, 128, "float64")


@pytest.mark.parametrize("bad", [0, -3, True, 1.5])
def test_bad_sizes(bad: object) -> None:
    with pytest.raises(UbPlanError, match="value_head_dim"):
        plan(bad, 128, "float32")  # type: ignore[arg-type]


def test_next_pow2() -> None:
    assert [next_pow2(n) for n in (1, 2, 3, 100, 128, 129)] == [1, 2, 4, 128, 128, 256]


#: The contract's keys (docs/architecture.md); preflight's --json test reuses them.
UB_PLAN_KEYS = {
    "h_block_size",
    "tile_bytes",
    "buffered_bytes",
    "ub_bytes",
    "headroom_bytes",
    "fits",
    "plane_overflow",
    "value_head_dim",
    "key_head_dim",
    "dtype",
    "buffers",
    "num_heads",
}


def test_as_dict_has_the_contract_keys() -> None:
    assert set(plan(128, 128, "float32").as_dict()) == UB_PLAN_KEYS


@pytest.mark.parametrize(
    ("dtype", "v", "k", "h", "fits", "overflow", "code"),
    [
        ("float32", "128", "128", 1, True, False, 0),
        ("bfloat16", "128", "128", 2, True, False, 0),
        ("float32", "512", "256", 1, False, True, 1),
    ],
)
def test_cli_json(
    dtype: str, v: str, k: str, h: int, fits: bool, overflow: bool, code: int
) -> None:
    out = run_cli("--value-head-dim", v, "--key-head-dim", k, "--dtype", dtype, "--json")
    assert out.returncode == code
    answer = json.loads(out.stdout)
    assert (answer["h_block_size"], answer["fits"], answer["plane_overflow"]) == (h, fits, overflow)


def test_cli_text_and_in_process() -> None:
    assert (
        ub_plan.main(["--value-head-dim", "128", "--key-head-dim", "128", "--dtype", "float32"])
        == 0
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--value-head-dim", "0", "--key-head-dim", "128", "--dtype", "float32"],
            "argument --value-head-dim: 0 is not an integer of 1 or more",
        ),
        (
            ["--value-head-dim", "x", "--key-head-dim", "128", "--dtype", "float32"],
            "argument --value-head-dim: 'x' is not an integer",
        ),
        (["--value-head-dim", "128", "--key-head-dim", "128", "--dtype", "int8"], "invalid choice"),
        (["--key-head-dim", "128", "--dtype", "float32"], "required"),
    ],
)
def test_cli_bad_input_is_one_clear_line(args: list[str], needle: str) -> None:
    out = run_cli(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert needle in out.stderr
