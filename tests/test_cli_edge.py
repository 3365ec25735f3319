"""The CLI's edge (``qwen_npu.cli_parser.run_verb``) and the parser's types, case by case.

Why this exists: ``tests/test_cli_bad_input.py`` throws bad input at every verb; this pins what
the edge itself says for each kind of exception a verb may leave uncaught (one line naming the
flag or file and the fix, the exit code of docs/cli.md) and what the types refuse, so that a
regression names its cause.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from qwen_npu.cli_parser import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NO_SPACE,
    OneLineParser,
    fraction,
    input_dir,
    input_file,
    non_negative_int,
    output_dir,
    output_file,
    port,
    positive_float,
    positive_int,
    run_verb,
)


def _edge(
    raise_it: Callable[[list[str]], None], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    def verb(args: list[str]) -> int:
        raise_it(args)
        return 0

    code = run_verb("qwen-npu demo", verb, argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return code, err.strip()


def test_a_folder_given_for_a_file_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, line = _edge(
        lambda a: Path(a[1]).read_text() and None, ["--config", str(tmp_path)], capsys
    )
    assert code == EXIT_BAD_INPUT
    assert line == f"qwen-npu demo: error: --config {tmp_path}: is a folder; pass a file"


def test_a_file_inside_a_given_folder_names_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def read(args: list[str]) -> None:
        (Path(args[0]) / "config.json").read_text()

    code, line = _edge(read, [str(tmp_path)], capsys)
    assert code == EXIT_BAD_INPUT
    assert line.startswith(f"qwen-npu demo: error: {tmp_path}: {tmp_path / 'config.json'}: no such")


def test_no_space_is_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    def full(args: list[str]) -> None:
        raise OSError(28, "No space left on device", "/data/x")

    code, line = _edge(full, [], capsys)
    assert code == EXIT_NO_SPACE and "/data/x: no space left" in line


def test_non_utf8_yaml_and_json_name_the_file_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary, broken_yaml, broken_json = tmp_path / "b", tmp_path / "y.yaml", tmp_path / "j.json"
    binary.write_bytes(b"\xff\xfe\x00")
    broken_yaml.write_text("a: [1,\n")
    broken_json.write_text("{oops")

    code, line = _edge(lambda a: Path(a[1]).read_text() and None, ["--in", str(binary)], capsys)
    assert code == EXIT_BAD_INPUT and f"--in {binary}: not UTF-8 text" in line

    def load_yaml(args: list[str]) -> None:
        with open(args[1]) as handle:
            yaml.safe_load(handle)

    code, line = _edge(load_yaml, ["--values", str(broken_yaml)], capsys)
    assert code == EXIT_BAD_INPUT and f"--values {broken_yaml}: not valid YAML (" in line
    assert "line 2" in line

    def load_json(args: list[str]) -> None:
        path = Path(args[0])
        json.loads(path.read_text())

    code, line = _edge(load_json, [str(broken_json)], capsys)
    assert code == EXIT_BAD_INPUT and f"{broken_json}: not valid JSON (" in line


def test_a_pem_that_is_not_one_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    garbage = tmp_path / "ca.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")

    def load(args: list[str]) -> None:
        ssl.create_default_context(cafile=args[1])

    code, line = _edge(load, ["--ca-bundle", str(garbage)], capsys)
    assert code == EXIT_BAD_INPUT and "TLS failed with --ca-bundle" in line


def test_a_refused_connection_is_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    def refused(args: list[str]) -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    code, line = _edge(refused, [], capsys)
    assert code == EXIT_FAILED and "cannot reach the target (Connection refused)" in line


def test_ctrl_c_is_one_line_and_130(capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(args: list[str]) -> None:
        raise KeyboardInterrupt

    code, line = _edge(interrupted, [], capsys)
    assert (code, line) == (EXIT_INTERRUPTED, "qwen-npu demo: interrupted")


def test_a_bug_is_one_line_unless_asked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def bug(args: list[str]) -> None:
        raise ZeroDivisionError("division by zero")

    code, line = _edge(bug, [], capsys)
    assert code == EXIT_FAILED and "unexpected ZeroDivisionError: division by zero" in line
    monkeypatch.setenv("QWEN_NPU_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        run_verb("qwen-npu demo", lambda a: bug(a) or 0, [])


def test_a_broken_pipe_on_a_captured_stdout_is_quiet_141(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def closed(args: list[str]) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    assert run_verb("qwen-npu demo", lambda a: closed(a) or 0, []) == EXIT_BROKEN_PIPE
    assert capsys.readouterr().err == ""


def test_the_parser_error_shape(capsys: pytest.CaptureFixture[str]) -> None:
    parser = OneLineParser(prog="qwen-npu demo")
    parser.add_argument("--n", type=positive_int)
    with pytest.raises(SystemExit) as done:
        parser.parse_args(["--n=0"])
    assert done.value.code == EXIT_BAD_INPUT
    assert capsys.readouterr().err == (
        "qwen-npu demo: error: argument --n: 0 is not an integer of 1 or more; "
        "see: qwen-npu demo --help\n"
    )


@pytest.mark.parametrize(
    ("kind", "bad", "good"),
    [
        (positive_int, ["0", "-1", "1.5", "inf", "nan", "x", ""], ["1", " 7 "]),
        (non_negative_int, ["-1", "inf", "x"], ["0", "3"]),
        (positive_float, ["0", "-0.5", "inf", "-inf", "nan", "1e400", "x"], ["0.1", "1e300"]),
        (port, ["0", "65536", "-1", "x"], ["1", "65535"]),
        (fraction, ["0", "1.01", "nan", "inf"], ["0.5", "1"]),
    ],
)
def test_numbers(kind: Callable[[str], object], bad: list[str], good: list[str]) -> None:
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            kind(text)
    for text in good:
        kind(text)


def test_output_paths_are_checked_for_real(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert output_file(str(tmp_path / "new" / "deeper" / "out.jsonl")).name == "out.jsonl"
    assert output_file(str(tmp_path / "file")) == tmp_path / "file"  # appended to
    for bad in (str(tmp_path), str(tmp_path / "file" / "x"), ""):
        with pytest.raises(argparse.ArgumentTypeError):
            output_file(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="is a file, not a folder"):
        output_dir(str(tmp_path / "file"))
    assert output_dir(str(tmp_path / "new-dir")) == tmp_path / "new-dir"
    assert not (tmp_path / "new").exists() and not (tmp_path / "new-dir").exists()
    assert sorted(os.listdir(tmp_path)) == ["file"]  # the checks leave nothing behind


def test_input_paths(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert input_file(str(tmp_path / "file")) == tmp_path / "file"
    assert input_dir(str(tmp_path)) == tmp_path
    for kind, bad, said in (
        (input_file, tmp_path, "is a folder"),
        (input_file, tmp_path / "none", "no such file"),
        (input_file, tmp_path / "file" / "x", "part of the path is a file"),
        (input_dir, tmp_path / "file", "not a folder"),
        (input_dir, tmp_path / "none", "no such folder"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            kind(str(bad))


def test_docs_cli_has_every_verb_and_every_shared_code() -> None:
    """docs/cli.md's tables hold every verb of VERBS and every code cli_parser defines."""
    import qwen_npu.cli_parser as shared
    from qwen_npu.cli import VERBS
    from tools.paths import DOCS

    page = (DOCS / "cli.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    listed = {verb for row in rows for verb in VERBS if f"`{verb}" in row.split("|")[1]}
    assert listed == set(VERBS), f"docs/cli.md lacks {set(VERBS) - listed}"
    codes = {v for k, v in vars(shared).items() if k.startswith("EXIT_")}
    assert all(f"\n| {code} | " in page for code in codes), codes


def test_oncall_outside_make_says_its_errors_in_the_one_shape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from qwen_npu.cli import main

    assert main(["oncall", "patch-off"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("qwen-npu oncall: error: patch-off: set --patch=<name>, one of: ")
    assert len(err.splitlines()) == 1
