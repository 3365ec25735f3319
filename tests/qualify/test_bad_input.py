"""Every path and number of ``qwen-npu qualify`` refused by the parser in one line, exit 2,
before anything runs (the CLI-wide bad-input suite throws the same at every verb)."""

from __future__ import annotations

from pathlib import Path

import pytest

from qwen_npu.cli import main


def qwen_npu(argv: list[str]) -> int:
    """The CLI's exit status (the parser's refusal is a SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "empty"
    empty.write_text("")
    binary = tmp_path / "binary"
    binary.write_bytes(b"\x00\xff\xfe" * 100)
    a_file = tmp_path / "file"
    a_file.write_text("x\n")
    return {
        "missing": str(tmp_path / "missing"),
        "dir": str(tmp_path),
        "empty": str(empty),
        "binary": str(binary),
        "file": str(a_file),
    }


@pytest.mark.parametrize("flag", ["--eval", "--engine-log", "--api-key-file", "--baseline"])
@pytest.mark.parametrize("kind", ["missing", "dir", "empty", "binary"])
def test_a_bad_input_file(
    flag: str, kind: str, paths: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert qwen_npu(["qualify", flag, paths[kind]]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"argument {flag}" in err, err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--prompts", "0"), ("--max-new-tokens", "-1"), ("--early-tokens", "nan"),
        ("--num-prompts", "inf"), ("--input-len", "0"), ("--output-len", "1.5"),
        ("--repeats", "0"), ("--min-accuracy", "1.5"), ("--min-accuracy", "nan"),
        ("--timeout", "0"), ("--hbm-gbps", "-1"), ("--kernel-iters", "0"),
        ("--eval-shots", "-1"), ("--concs", "0"), ("--concs", "one"), ("--kernel-batches", ""),
        ("--target", "localhost:30000"), ("--compare", "ftp://x"), ("--claims", "speed,nope"),
        ("--record", "novalue"), ("--state-dir", "/nonexistent/state"),
    ],
)  # fmt: skip
def test_a_bad_number_or_value(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert qwen_npu(["qualify", flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"argument {flag}" in err, err


def test_an_output_dir_that_is_a_file_is_refused_before_the_run(
    paths: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert qwen_npu(["qualify", "--output-dir", paths["file"]]) == 2
    assert "argument --output-dir" in capsys.readouterr().err
