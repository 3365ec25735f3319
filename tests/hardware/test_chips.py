"""The chips' SSM state rules: what the prefill and verify ops take, by chip and dtype."""

from __future__ import annotations

import pytest

from qwen_npu.hardware import chips


@pytest.mark.parametrize("chip", ["910b", "a3"])
def test_should_refuse_fp32_state_naming_the_prefill_op_when_chip_is_910b_or_a3(chip: str) -> None:
    limit = chips.prefill_op_limit(chip, "float32")
    assert limit is not None and chips.PREFILL_OP in limit and "Ascend950" in limit
    assert chips.prefill_op_limit(chip, "bfloat16") is None


def test_should_take_fp32_state_but_flag_the_bf16_only_verify_op_when_chip_is_ascend950() -> None:
    assert chips.prefill_op_limit("ascend950", "float32") is None
    verify = chips.verify_op_limit("float32")
    assert verify is not None and chips.VERIFY_OP in verify
    assert chips.verify_op_limit("bfloat16") is None


def test_should_refuse_fp16_state_on_every_chip() -> None:
    assert all(chips.prefill_op_limit(chip, "float16") for chip in chips.CHIPS)


@pytest.mark.parametrize(
    ("raw", "chip"),
    [("", "910b"), ("A3", "a3"), ("ascend-910c", "a3"), ("950", "ascend950"), ("910c", "910b")],
)
def test_should_read_the_chip_from_env_when_known_else_default(raw: str, chip: str) -> None:
    assert chips.chip_from_env({chips.ENV_CHIP: raw}) == chip
