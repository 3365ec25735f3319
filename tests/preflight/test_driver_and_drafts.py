"""Preflight on the node (issue 33): the driver's version.info against the image's HDK minimum,
and the verify op's draft limit on the engine's own command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.checkpoints import Schemes, write_checkpoint
from tests.preflight.conftest import RunCli
from tests.preflight.test_ssm_state import ENGINE

#: The driver's version.info as installed (/usr/local/Ascend/driver/version.info).
VERSION_INFO = """Version={v}
ascendhal_version=7.35.23
aicpu_version=1.0
tdt_version=1.0
Innerversion=V100R001C23SPC002B212
compatible_version_fw=[7.0.0,7.8.99]
package_version={v}
"""


def _mtp_line(ckpt: Path, drafts: int) -> list[str]:
    spec = ["--speculative-algorithm", "NEXTN", "--speculative-num-draft-tokens", str(drafts)]
    return ["--model-path", str(ckpt), *ENGINE, *spec]


@pytest.mark.parametrize(("drafts", "ok"), [(4, True), (8, True), (9, False)])
def test_draft_tokens_above_the_verify_ops_limit_stop_the_pod(
    ckpt_35b: Path, run_cli: RunCli, drafts: int, ok: bool
) -> None:
    code, data, _ = run_cli("--json", "--engine-args", *_mtp_line(ckpt_35b, drafts))
    codes = {f["code"] for f in data["blocking"]}
    assert ("draft-tokens-over-limit" in codes) is not ok, data["blocking"]
    if not ok:
        assert code == 1
        (f,) = [f for f in data["blocking"] if f["code"] == "draft-tokens-over-limit"]
        assert "--speculative-num-draft-tokens 9" in f["message"]
        assert "mtp.numDraftTokens" in f["message"] and " 8 " in f["message"]


@pytest.mark.parametrize(
    ("installed", "blocked"), [("25.2.0", False), ("26.0.rc1", False), ("25.0.rc1.1", True)]
)
def test_a_driver_below_the_supported_hdk_is_blocking(
    ckpt_35b: Path,
    run_cli: RunCli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    installed: str,
    blocked: bool,
) -> None:
    info = tmp_path / "version.info"
    info.write_text(VERSION_INFO.format(v=installed))
    monkeypatch.setenv("QWEN_NPU_MIN_HDK_VERSION", "25.2")
    monkeypatch.setenv("QWEN_NPU_DRIVER_VERSION_FILE", str(info))
    code, data, _ = run_cli("--json", "--engine-args", "--model-path", str(ckpt_35b), *ENGINE)
    found = [f for f in data["findings"] if f["code"].startswith("driver-")]
    if not blocked:
        assert code == 0 and found == []
        return
    assert code == 1
    (f,) = found
    assert f["code"] == "driver-unsupported" and f["severity"] == "blocking"
    assert installed in f["message"] and "25.2" in f["message"]
    assert "qwen-npu.io/ascend-hdk" in f["message"] and "scheduling.driverVersion" in f["message"]


def test_without_the_file_in_the_image_it_says_not_checked_and_outside_nothing(
    ckpt_35b: Path, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QWEN_NPU_DRIVER_VERSION_FILE", str(tmp_path / "absent"))
    code, data, _ = run_cli("--json", "--engine-args", "--model-path", str(ckpt_35b), *ENGINE)
    assert code == 0 and not [f for f in data["findings"] if f["code"].startswith("driver-")]
    monkeypatch.setenv("QWEN_NPU_MIN_HDK_VERSION", "25.2")
    code, data, _ = run_cli("--json", "--engine-args", "--model-path", str(ckpt_35b), *ENGINE)
    assert code == 0
    (f,) = [f for f in data["findings"] if f["code"].startswith("driver-")]
    assert f["code"] == "driver-not-checked" and f["severity"] == "info"
    monkeypatch.setenv("QWEN_NPU_MIN_HDK_VERSION", "25")
    code, _, err = run_cli("--json", "--engine-args", "--model-path", str(ckpt_35b), *ENGINE)
    assert code == 2 and "QWEN_NPU_MIN_HDK_VERSION='25' is not MAJOR.MINOR" in err


def test_unquant_draft_is_refused_for_a_quantized_mtp_and_passed_for_a_float_one(
    ckpt_35b: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    """mtp.draftQuantization=unquant: SGLang 0.5.23 then builds the draft without any quant
    config on NPU, right only where every mtp.* entry is FLOAT."""
    quantized = write_checkpoint(tmp_path / "q", schemes=Schemes(mtp="W8A8_DYNAMIC"))
    unquant = ["--speculative-draft-model-quantization", "unquant"]
    code, data, _ = run_cli("--json", "--engine-args", *_mtp_line(quantized, 4), *unquant)
    assert code == 1
    (f,) = [f for f in data["blocking"] if f["code"] == "draft-unquant-quantized-mtp"]
    assert "mtp.draftQuantization" in f["message"]
    code, data, _ = run_cli("--json", "--engine-args", *_mtp_line(ckpt_35b, 4), *unquant)
    assert code == 0, data["blocking"]
    # Inherited (the chart's default): the quantized MTP keeps its config, nothing to refuse.
    code, data, _ = run_cli("--json", "--engine-args", *_mtp_line(quantized, 4))
    assert "draft-unquant-quantized-mtp" not in {f["code"] for f in data["findings"]}
