"""Strictness that fits the engine's mode (issue 33): each patch declares the modes it serves, and
`patches verify --strict --startup --engine-args ...` fails the start only for a patch the mode
uses; for the others it warns in the same line, says so in --json and in the state file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from qwen_npu.patches import cli, modes, state
from qwen_npu.patches.fixes import gdn_decode_state_layout as decode
from qwen_npu.patches.fixes import mamba_scatter_ub_aware as scatter
from qwen_npu.patches.registry import BY_NAME, GDN_CONTRACT, PATCHES

MTP_ON = ["--model-path", "/m", "--speculative-algorithm", "NEXTN", "--mamba-ssm-dtype", "bfloat16"]
MTP_OFF = ["--model-path", "/m", "--mamba-ssm-dtype", "bfloat16"]


def mode(argv: list[str], env: dict[str, str] | None = None) -> modes.Mode:
    found = modes.from_argv(argv, env or {})
    assert found is not None
    return found


def used(m: modes.Mode | None) -> dict[str, bool]:
    return {p.name: modes.uses(p, m) for p in PATCHES}


def test_each_mode_uses_the_patches_whose_code_it_runs() -> None:
    assert used(mode(MTP_ON)) == {
        "modelslim-moe-unquant-fallback": True,
        "mtp-modelslim-unquant": True,
        "mamba-scatter-ub-aware": False,  # bf16: the plan is the kernel's default
        "gdn-decode-state-layout": False,  # NEXTN never runs the Triton decode kernel
    }
    assert used(mode(MTP_OFF)) == {
        "modelslim-moe-unquant-fallback": False,
        "mtp-modelslim-unquant": False,
        "mamba-scatter-ub-aware": False,
        "gdn-decode-state-layout": True,
    }
    fp32 = mode([*MTP_ON, "--mamba-ssm-dtype=float32"])  # the last one wins, as in argparse
    assert fp32.state_dtype == "float32" and used(fp32)["mamba-scatter-ub-aware"] is True
    # The state dtype from the environment when the line has none; unknown counts as used.
    assert mode(["--model-path", "/m", "--speculative-algorithm", "NEXTN"]).state_dtype is None
    assert used(mode(["--model-path", "/m", "--speculative-algorithm", "NEXTN"]))[scatter.INFO.name]
    env = {"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"}
    assert not used(mode(["--model-path", "/m", "--speculative-algorithm", "NEXTN"], env))[
        scatter.INFO.name
    ]
    # The upstream flag builds the draft without the ModelSlim config: the draft fixes fall back.
    unquant = mode([*MTP_ON, "--speculative-draft-model-quantization", "unquant"])
    assert unquant.draft_unquant and used(unquant) == dict.fromkeys(BY_NAME, False)
    # No engine command line (verify by hand): every patch counts, the old strictness.
    assert modes.from_argv(["qwen-npu", "patches", "verify"], {}) is None
    assert used(None) == dict.fromkeys(BY_NAME, True)


def test_the_contract_links_follow_the_mode() -> None:
    on, off = mode(MTP_ON), mode(MTP_OFF)
    by_mode = {
        link.name: (modes.link_used(link, on), modes.link_used(link, off)) for link in GDN_CONTRACT
    }
    assert by_mode == {
        "pool_layout": (True, True),
        "prefill_op": (True, True),
        "verify_op": (True, False),
        "mover": (True, False),
        "decode_kernel": (False, True),
        "ssm_dtype": (True, True),
    }


@pytest.fixture()
def drifted_decode(
    modelslim: ModuleType,
    mtp_module: ModuleType,
    backend: ModuleType,
    gdn_triton: ModuleType,
    decode_kernels: dict[str, ModuleType],
    fresh: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """All targets imported, the K-major decode kernel bound (as on an NPU), and the decode
    wrapper's text changed (its fingerprint drifts)."""
    fresh(decode)
    kernel = decode_kernels["k-major"].fused_sigmoid_gating_delta_rule_update_decode_npu
    monkeypatch.setattr(gdn_triton, decode.KERNEL, kernel)
    monkeypatch.setattr(decode, "PINS", (replace(decode.PINS[0], fingerprint="f" * 64),))


def startup(capsys: pytest.CaptureFixture[str], engine: list[str]) -> tuple[int, str]:
    code = cli.main(["verify", "--strict", "--startup", "--engine-args", *engine])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out
    return code, out[0]


@pytest.mark.sglang
def test_mtp_on_with_a_changed_decode_kernel_warns_and_starts_mtp_off_refuses(
    drifted_decode: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, line = startup(capsys, MTP_ON)
    assert code == 0, line
    assert line.startswith("qwen_npu.patches level=WARNING event=verify_passed patches=4 ")
    assert 'unused_problems="gdn-decode-state-layout=drifted"' in line
    assert 'mode="MTP on, state bfloat16"' in line and "docs/runbook.md" in line

    code, line = startup(capsys, MTP_OFF)
    assert code == 1, line
    assert line.startswith("qwen_npu.patches level=ERROR event=verify_failed ")
    assert 'failed="gdn-decode-state-layout=drifted"' in line


@pytest.mark.sglang
def test_json_says_per_patch_whether_the_mode_uses_it(
    drifted_decode: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["verify", "--strict", "--json", "--log", "--engine-args", *MTP_ON])
    out, err = capsys.readouterr()
    report = json.loads(out)
    # The patch's own log line while applying: a warning that names the mode, not an error.
    (drift,) = [x for x in err.splitlines() if "event=patch.drifted" in x]
    assert "level=WARNING" in drift and "used_by_mode=False" in drift
    assert "does not use the patch" in drift
    assert code == 0 and report["ok"] is True
    assert report["mode"] == {"mtp": True, "state_dtype": "bfloat16", "draft_quantization": None}
    rows = {r["name"]: r for r in report["patches"]}
    assert {n: r["used_by_mode"] for n, r in rows.items()} == used(mode(MTP_ON))
    assert rows[decode.INFO.name]["state"] == "drifted"
    assert report["unused_problems"] == ["gdn-decode-state-layout=drifted"]
    # Without a command line: every patch counts (and the drift fails --strict, as before).
    code = cli.main(["verify", "--strict", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and {r["used_by_mode"] for r in report["patches"]} == {None}


@pytest.mark.sglang
def test_the_state_file_records_the_mode_for_the_sidecar(
    drifted_decode: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("QWEN_NPU_STATE_DIR", str(tmp_path))
    startup(capsys, MTP_ON)
    recorded = (state.read_state(tmp_path) or {})["patches"]
    assert recorded[decode.INFO.name]["used_by_mode"] is False
    assert recorded[decode.INFO.name]["state"] == "drifted"
    # the override ends with the verb: this process's own mode (pytest's argv: none) again
    assert modes.current() is None
