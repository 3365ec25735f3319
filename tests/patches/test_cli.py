"""`qwen-npu patches list | verify | explain`, in process against SGLang 0.5.23's real modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from qwen_npu.patches import cli, gdn_contract, hook
from qwen_npu.patches.fixes import mamba_scatter_ub_aware as scatter
from qwen_npu.patches.fixes import mtp_modelslim_unquant as mtp_patch
from qwen_npu.patches.registry import GDN_CONTRACT, PATCHES


@pytest.fixture()
def targets(
    modelslim: ModuleType, mtp_module: ModuleType, backend: ModuleType, gdn_triton: ModuleType
) -> None:
    """All four targets imported (and so patched by the start-up hook)."""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.sglang
def test_verify_strict_passes_on_the_pinned_sglang(
    targets: None, capsys: pytest.CaptureFixture[str]
) -> None:
    mtp_on = [
        "--model-path", "/models/qwen", "--speculative-algorithm", "NEXTN",
        "--mamba-ssm-dtype", "bfloat16",
    ]  # fmt: skip
    code, out, _ = run(capsys, "verify", "--strict", "--json", "--engine-args", *mtp_on)
    report = json.loads(out)
    assert code == 0 and report["ok"] is True
    # On this CPU SGLang's decode binds its own kernel, not sgl-kernel-npu's: the decode patch's
    # target is not here (never "upstream-fixed"), which MTP on does not run.
    expected = {"gdn-decode-state-layout": "target-missing"}
    assert [(r["name"], r["state"]) for r in report["patches"]] == [
        (p.name, expected.get(p.name, "applied")) for p in PATCHES
    ]
    decode = next(r for r in report["patches"] if r["name"] == "gdn-decode-state-layout")
    assert decode["used_by_mode"] is False and "SGLang's own" in decode["detail"]
    contract = report["gdn_contract"]
    assert list(contract) == [link.name for link in GDN_CONTRACT]
    assert {name: v["verdict"] for name, v in contract.items()} == {
        "pool_layout": "pass",
        "prefill_op": "pass",
        "verify_op": "pass",
        "mover": "pass",
        "decode_kernel": "unknown",  # no sgl_kernel_npu decode kernel here: the ledger accepts it
        "ssm_dtype": "pass",  # bfloat16 from --mamba-ssm-dtype, MTP on
    }
    evidence = contract["decode_kernel"]["evidence"]
    assert "fla/fused_sigmoid_gating_recurrent_decode_optimized.py" in evidence


def test_a_contract_fail_fails_strict_and_says_which(
    targets: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = gdn_contract.check

    def with_fp32(sources: Any = None) -> dict[str, Any]:
        verdicts = real(sources)
        verdicts["ssm_dtype"] = gdn_contract.Verdict("fail", "float32 from config, chip 910b")
        return verdicts

    monkeypatch.setattr(gdn_contract, "check", with_fp32)
    code, out, err = run(capsys, "verify", "--strict")
    assert code == 1
    assert "gdn_contract ssm_dtype      fail     float32 from config, chip 910b" in out
    assert "gdn_contract next (ssm_dtype): " in err
    assert "unknown, accepted by the ledger: decode_kernel:" in err
    assert run(capsys, "verify")[0] == 0
    code, out, _ = run(capsys, "verify", "--strict", "--json")
    assert code == 1 and json.loads(out)["ok"] is False


def test_verify_strict_fails_on_a_disabled_patch(
    targets: None, fresh: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh(mtp_patch)
    monkeypatch.setenv("QWEN_NPU_DISABLE_PATCHES", mtp_patch.INFO.name)
    code, out, err = run(capsys, "verify", "--strict")
    assert code == 1
    assert "mtp-modelslim-unquant           disabled" in out
    assert "unset QWEN_NPU_DISABLE_PATCHES" in err
    assert run(capsys, "verify")[0] == 0  # without --strict it only reports


def test_verify_strict_fails_on_a_misspelt_kill_switch(
    targets: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QWEN_NPU_DISABLE_PATCHES", "mtp-modelslim-unqant")
    code, out, err = run(capsys, "verify", "--strict")
    assert code == 1  # the typo switched nothing off: strict must not pass it
    assert "mtp-modelslim-unquant           applied" in out
    assert (
        "qwen-npu patches verify: error: QWEN_NPU_DISABLE_PATCHES: unknown patch name(s) "
        "mtp-modelslim-unqant; use 'all' or one "
        "of: " + ", ".join(p.name for p in PATCHES) + " (chart value patches.disabled)"
    ) in err.splitlines()
    code, out, _ = run(capsys, "verify", "--strict", "--json")
    assert code == 1 and json.loads(out)["ok"] is False
    monkeypatch.setenv("QWEN_NPU_DISABLE_PATCHES", "all")
    assert run(capsys, "verify")[2].count("unknown patch name") == 0


def test_verify_reports_a_target_that_does_not_import(
    targets: None, fresh: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh(scatter)
    triggers = dict(hook.TRIGGERS)
    triggers[scatter.__name__] = ("sgl_kernel_npu_is_not_installed",)
    monkeypatch.setattr(hook, "TRIGGERS", triggers)
    code, out, _ = run(capsys, "verify", "--strict", "--json")
    row = {r["name"]: r for r in json.loads(out)["patches"]}[scatter.INFO.name]
    assert code == 1
    assert row["state"] == "target-missing"
    assert "ModuleNotFoundError" in row["detail"]


def test_verify_catches_a_lost_rebinding(
    targets: None,
    backend: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(backend, "move_intermediate_cache", lambda *a, **k: None)
    code, out, _ = run(capsys, "verify", "--strict", "--json")
    row = {r["name"]: r for r in json.loads(out)["patches"]}[scatter.INFO.name]
    assert code == 1 and row["state"] == "drifted" and "rebound" in row["detail"]


def test_list(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QWEN_NPU_DISABLE_PATCHES", "mamba-scatter-ub-aware")
    code, out, _ = run(capsys, "list")
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == [p.name for p in PATCHES]
    assert lines[2].endswith("(disabled by QWEN_NPU_DISABLE_PATCHES)")
    rows = json.loads(run(capsys, "list", "--json")[1])
    assert rows[2]["disabled_by_env"] is True and rows[0]["disabled_by_env"] is False


def test_explain(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qwen_npu.patches.state import write_patch_state

    write_patch_state(
        "mtp-modelslim-unquant", "applied", target="t", detail="d", state_dir=tmp_path
    )
    monkeypatch.setenv("QWEN_NPU_STATE_DIR", str(tmp_path))
    code, out, _ = run(capsys, "explain", "mtp-modelslim-unquant")
    assert code == 0
    assert "target:       sglang.srt.models.qwen3_5_mtp:_mtp_quant_config" in out
    assert "pull/34353" in out and "remove when:" in out
    assert "kill switch:  QWEN_NPU_DISABLE_PATCHES=mtp-modelslim-unquant" in out
    assert "state file:   applied" in out


def test_explain_unknown_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "explain", "no-such-patch")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "known: modelslim-moe-unquant-fallback" in err


@pytest.mark.sglang
def test_verify_in_the_bare_venv_names_what_is_missing_and_claims_no_fix() -> None:
    """`.venv/bin/qwen-npu patches verify` as a user runs it (no stand-ins on the path): SGLang's
    NPU modules do not import there; one line says what is missing and where the real picture is,
    and no patch is called upstream-fixed."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QWEN_NPU_PATCHES_HOOK")}
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "qwen_npu", "patches", "verify", "--json"],
        capture_output=True, text=True, env=env, cwd="/", timeout=300, check=False,
    )  # fmt: skip
    states = {r["name"]: r["state"] for r in json.loads(done.stdout)["patches"]}
    assert "upstream-fixed" not in states.values(), states
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "qwen_npu", "patches", "verify"],
        capture_output=True, text=True, env=env, cwd="/", timeout=300, check=False,
    )  # fmt: skip
    said = [line for line in done.stderr.splitlines() if "this environment lacks" in line]
    assert len(said) == 1 and "torchvision" in said[0] and "make verify-patches" in said[0]
