"""modelslim_desc: reading descriptions, bad input, MoE lookup rules and the MTP questions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qwen_npu.checkpoint.modelslim_desc import (
    KNOWN_SCHEMES,
    DescriptionError,
    find_moe_schemes,
    load_description,
    moe_all_float,
    moe_layer_is_unquantized,
    moe_prefix_candidates,
    mtp_entries,
    mtp_is_all_float,
    validate_description,
)
from tests.patches.helpers import W_NAMES, description, expert_entries

MTP = "mtp.layers.0.mlp.experts"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "quant_model_description.json"
    path.write_text(text)
    return path


def test_load_a_good_description(tmp_path: Path) -> None:
    desc = description(mtp=expert_entries(MTP, "FLOAT"))
    assert load_description(write(tmp_path, json.dumps(desc))) == desc


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ('{"model.a.weight": "W8A8", ', ["not valid JSON", "line 1"]),
        ("[1, 2]", ["top level is a JSON list", "expected an object"]),
        ('"FLOAT"', ["top level is a JSON str"]),
        ('{"model.a.weight": "W9A9"}', ["key 'model.a.weight'", "unknown scheme 'W9A9'"]),
        (
            '{"a.weight": "W9A9", "b.weight": "FP4", "c.weight": "FLOAT"}',
            ["key 'a.weight'", "(and 1 more keys)"],
        ),
        ('{"model.a.weight": 3}', ["key 'model.a.weight'", "scheme is a JSON int"]),
    ],
)
def test_bad_descriptions_are_one_clear_line(tmp_path: Path, text: str, needles: list[str]) -> None:
    path = write(tmp_path, text)
    with pytest.raises(DescriptionError) as info:
        load_description(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert "fix:" in message and "\n" not in message
    for needle in needles:
        assert needle in message


def test_missing_file_names_the_path_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(DescriptionError, match="file not found; fix: point at the checkpoint"):
        load_description(tmp_path / "nope.json")


def test_metadata_values_are_not_schemes() -> None:
    desc = {
        "version": "1.0",
        "group_size": 0,
        "ignore": [],
        "packed_modules_mapping": {},
        "model_quant_type": "W8A8_DYNAMIC",
        "kv_cache_type": "C8",
        "a.weight": "FLOAT",
    }
    assert validate_description(desc) is desc


def test_every_known_scheme_loads_and_an_unknown_one_is_named() -> None:
    """What KNOWN_SCHEMES means, by behaviour: the readers accept each of them, and refuse a
    scheme outside them naming the key and the known list."""
    for scheme in sorted(KNOWN_SCHEMES):
        desc = {"model_quant_type": "W8A8_DYNAMIC", "model.layers.0.mlp.down_proj.weight": scheme}
        assert validate_description(desc) == desc
    bad = {"model.layers.0.mlp.down_proj.weight": "W3A3_FANCY"}
    with pytest.raises(DescriptionError, match=r"down_proj.weight.*'W3A3_FANCY'.*known: FLOAT"):
        validate_description(bad)


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
