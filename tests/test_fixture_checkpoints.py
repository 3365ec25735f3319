"""The synthetic checkpoints look like the published ones (sizes, names, key counts)."""

from __future__ import annotations

import pytest

from fixtures.checkpoints import SIZES, make_config, make_description, make_index


@pytest.mark.slow  # every size, the largest with 280k keys
def test_descriptions_hold_thousands_of_keys_named_like_modelslim() -> None:
    counts = {}
    for size in SIZES:
        config = make_config(size)
        desc = make_description(config)
        counts[size] = len(desc)
        index = make_index(config, desc)
        tensor_keys = set(desc) - {"model_quant_type", "version", "group_size"}
        assert tensor_keys == set(index["weight_map"])
    assert counts["27B"] > 1000
    assert counts["35B-A3B"] > 90_000
    assert counts["397B-A17B"] > 150_000
    desc = make_description(make_config("35B-A3B", vl=True))
    assert desc["model.language_model.layers.0.mlp.experts.255.down_proj.weight"] == "W8A8_DYNAMIC"
    assert desc["mtp.layers.0.mlp.experts.0.gate_proj.weight"] == "FLOAT"
    assert desc["mtp.layers.0.self_attn.q_proj.weight"] == "FLOAT"
