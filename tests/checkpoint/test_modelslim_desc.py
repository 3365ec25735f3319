"""modelslim_desc: the MoE lookup rules and the MTP questions."""

from __future__ import annotations

import pytest

from qwen_npu.checkpoint.modelslim_desc import (
    find_moe_schemes,
    moe_all_float,
    moe_layer_is_unquantized,
    moe_prefix_candidates,
    mtp_entries,
    mtp_is_all_float,
)
from tests.patches.helpers import W_NAMES, description, expert_entries

MTP = "mtp.layers.0.mlp.experts"


def test_prefix_candidates_in_sglangs_order() -> None:
    assert moe_prefix_candidates("model.layers.3.mlp.experts") == [
        "model.layers.3.mlp.experts",
        "model.layers.3.block_sparse_moe.experts",
        "language_model.model.layers.3.mlp.experts",
        "language_model.model.layers.3.block_sparse_moe.experts",
    ]
    assert moe_prefix_candidates("language_model.mtp.layers.0.mlp.experts")[2] == MTP


def test_first_convention_with_both_groups_wins() -> None:
    desc = {**expert_entries(MTP, "FLOAT", names=W_NAMES), f"{MTP}.0.gate_proj.weight": "W8A8"}
    found = find_moe_schemes(desc, MTP)
    assert found is not None
    assert found.convention == W_NAMES  # gate_proj alone has no down_proj: not a match
    assert found.w13 == {f"{MTP}.0.w1.weight": "FLOAT", f"{MTP}.0.w3.weight": "FLOAT"}


@pytest.mark.parametrize(
    ("entries", "answer"),
    [
        (expert_entries(MTP, "FLOAT"), True),
        (expert_entries(MTP, "FLOAT", names=W_NAMES), True),
        (expert_entries(MTP, "W8A8_DYNAMIC"), False),
        (expert_entries(MTP, "W4A8_DYNAMIC"), False),
    ],
)
def test_moe_layer_is_unquantized(entries: dict[str, str], answer: bool) -> None:
    assert moe_layer_is_unquantized(description(mtp=entries), MTP) is answer


def test_every_expert_must_be_float() -> None:
    desc = description(
        mtp={**expert_entries(MTP, "FLOAT", experts=4), f"{MTP}.3.down_proj.weight": "W8A8_DYNAMIC"}
    )
    assert moe_all_float(desc, MTP) is False
    with pytest.raises(ValueError, match="Mixed ModelSlim MoE schemes across the experts"):
        moe_layer_is_unquantized(desc, MTP)


def test_moe_all_float_never_raises() -> None:
    assert moe_all_float({}, MTP) is False
    assert moe_all_float(expert_entries(MTP, ("FLOAT", "W8A8", "FLOAT")), MTP) is False


def test_mtp_questions() -> None:
    desc = description(mtp={**expert_entries(MTP, "FLOAT"), "mtp.fc.weight": "FLOAT"})
    assert set(mtp_entries(desc)) == {*expert_entries(MTP, "FLOAT"), "mtp.fc.weight"}
    assert mtp_is_all_float(desc) is True
    desc["mtp.layers.0.self_attn.q_proj.weight"] = "W8A8_DYNAMIC"
    assert mtp_is_all_float(desc) is False
    assert mtp_is_all_float(description()) is False  # no MTP entries at all
    assert mtp_is_all_float({"language_model.mtp.fc.weight": "FLOAT"}) is True


def test_odd_values_in_an_unvalidated_description_do_not_crash_the_decision() -> None:
    """SGLang hands the patch whatever the file held; the decision must not raise on it."""
    desc = {
        f"{MTP}.0.gate_proj.weight": ["FLOAT"],
        f"{MTP}.0.up_proj.weight": "FLOAT",
        f"{MTP}.0.down_proj.weight": {"x": 1},
    }
    assert moe_all_float(desc, MTP) is False
    assert mtp_is_all_float(desc) is False
