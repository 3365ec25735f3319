"""``sidecar --check`` judges the model folder as it judges the canary's golden file (issue 40
item 12): a missing folder or a truncated config.json is one line and exit 2, at start, not an
``unknown`` UB plan found later; a sound checkpoint passes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fixtures.checkpoints import write_checkpoint
from qwen_npu.sidecar import cli


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("QWEN_NPU_"):
            monkeypatch.delenv(key)


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(["--check", *argv])
    return code, capsys.readouterr().err


def test_a_missing_model_dir_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _check(capsys, "--model-dir", "/nonexistent")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("qwen-npu sidecar: error: setting QWEN_NPU_MODEL_DIR / --model-dir")
    assert "/nonexistent" in err and "Traceback" not in err


def test_a_truncated_config_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = write_checkpoint(tmp_path / "c", "27B")
    text = (ckpt / "config.json").read_text()
    (ckpt / "config.json").write_text(text[: len(text) // 2])
    code, err = _check(capsys, "--model-dir", str(ckpt))
    assert code == 2 and err.count("\n") == 1 and "malformed JSON" in err, err


def test_a_sound_checkpoint_and_the_env_variable_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = write_checkpoint(tmp_path / "c", "27B")
    assert _check(capsys, "--model-dir", str(ckpt))[0] == 0
    monkeypatch.setenv("QWEN_NPU_MODEL_DIR", str(tmp_path / "gone"))
    code, err = _check(capsys)
    assert code == 2 and "QWEN_NPU_MODEL_DIR" in err
