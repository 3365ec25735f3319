"""Every profile, on each chip and with MTP on and off, renders a bf16 SSM state and its chip.

Issue 23: on 910B and A3 the GDN prefill op takes a float32 state only on Ascend950 and the MTP
verify op is bf16-only, so the chart passes `--mamba-ssm-dtype bfloat16` by default and renders
the chip (npu.chip -> QWEN_NPU_CHIP) into the engine and the preflight init container, which gets
the engine's own arguments after `--engine-args` (the chart builds the command line once).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from tools import chart as chart_tool

A3 = chart_tool.CHIPS_DIR / "a3.yaml"


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}


def _containers(values: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(role, engine, preflight) of every engine pod template."""
    docs = chart_tool.render_docs(values)
    found = []
    for role, template in chart_tool.pod_templates(chart_tool.engine_workload(docs)):
        engine = chart_tool.container(template, "engine")
        preflight = chart_tool.container(template, "preflight")
        assert engine is not None and preflight is not None, role
        found.append((role, engine, preflight))
    return found


@pytest.mark.parametrize("profile", chart_tool.profiles(), ids=lambda p: p.stem)
def test_should_render_bf16_state_and_chip_when_rendering_profile_on_each_chip_and_mtp(
    profile: Path,
) -> None:
    for overlay, mtp in itertools.product((None, A3), (True, False)):
        files = [profile, *([overlay] if overlay else [])]
        values = chart_tool.values_from(*files, extra={"mtp": {"enabled": mtp}})
        chip = "a3" if overlay or profile.stem.endswith("-a3") else "910b"
        for role, engine, preflight in _containers(values):
            where = (profile.stem, overlay and overlay.name, mtp, role)
            args = [str(a) for a in engine["args"]]
            assert dict(itertools.pairwise(args))["--mamba-ssm-dtype"] == "bfloat16", where
            assert ("--speculative-algorithm" in args) is mtp, where
            for env in (_env(engine), _env(preflight)):
                assert env["QWEN_NPU_CHIP"] == chip, where
                assert env["SGLANG_MAMBA_SSM_DTYPE"] == "bfloat16", where
            pre = [str(a) for a in preflight["args"]]
            assert pre[pre.index("--engine-args") + 1 :] == args, where


def test_should_render_float32_state_when_user_chooses_it_on_ascend950() -> None:
    values = {"npu": {"chip": "ascend950"}, "engine": {"mambaSsmDtype": "float32"}}
    ((_, engine, preflight),) = _containers(values)
    assert dict(itertools.pairwise(engine["args"]))["--mamba-ssm-dtype"] == "float32"
    assert _env(preflight)["QWEN_NPU_CHIP"] == "ascend950"
    # "" hands the choice back to the checkpoint's config.json (preflight then judges that dtype).
    ((_, engine, preflight),) = _containers({"engine": {"mambaSsmDtype": ""}})
    assert "--mamba-ssm-dtype" not in engine["args"]
    assert "SGLANG_MAMBA_SSM_DTYPE" not in _env(preflight)
