"""``patches verify``: bad input exits 2 before SGLang is imported; each fact is said once.

Issue 40 item 8: ``--model-path /nonexistent``, a malformed config, ``--mamba-ssm-dtype int7`` (on
its own or in ``--engine-args``), ``--site`` without ``--build`` and ``--build --site /nonexistent``
all exited 0, and the summary said the ssm link was accepted because "an image build has no model
and no command line" when a command line was given. Issue 42 item 5: it printed each fact three
times (table, log line, next line) and was silent while SGLang imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from qwen_npu.log import PartLog
from qwen_npu.patches import cli, gdn_contract
from qwen_npu.patches.registry import GDN_CONTRACT

PROG = "qwen-npu patches verify: error: "
LEDGER_WHY = next(link.unknown_why for link in GDN_CONTRACT if link.name == "ssm_dtype")


@pytest.fixture()
def no_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad input must be refused before the slow part: the patches are never applied."""

    def must_not_run() -> list[dict[str, Any]]:
        raise AssertionError("verify_all ran on bad input")

    monkeypatch.setattr(cli, "verify_all", must_not_run)


def _bad_config(tmp_path: Path) -> str:
    (tmp_path / "config.json").write_text('{"hidden_size": 20')
    return str(tmp_path)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model-path", "/nonexistent"], "--model-path /nonexistent: "),
        (["--model-path", "BAD"], "malformed JSON"),
        (["--site", "/x"], "--site only with --build"),
        (["--npu"], "--npu only with --build"),
        (["--build", "--site", "/nonexistent"], "--site /nonexistent: no such folder"),
        (["--strict", "--engine-args", "--model-path", "/m", "--mamba-ssm-dtype", "int7"],
         "--mamba-ssm-dtype int7: not a state dtype"),
        (["--startup", "--engine-args", "--mamba-ssm-dtype=int7"], "--mamba-ssm-dtype int7"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_in_one_line_before_sglang(
    no_import: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    needle: str,
) -> None:
    argv = [_bad_config(tmp_path) if a == "BAD" else a for a in argv]
    code = cli.main(["verify", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(PROG) and err.count("\n") == 1 and needle in err, err


def test_an_unknown_dtype_flag_is_refused_by_the_parser(
    no_import: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["verify", "--mamba-ssm-dtype", "int7"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "int7" in err and err.count("\n") == 1


def _fake_run(monkeypatch: pytest.MonkeyPatch, seen: list[Any]) -> None:
    """Two target-missing patches and an unknown ssm link: the states a bare venv gives."""
    from qwen_npu.patches.registry import PATCHES

    def rows() -> list[dict[str, Any]]:
        return [
            {"name": p.name, "state": "target-missing", "detail": "cannot import x"}
            for p in PATCHES[:2]
        ] + [{"name": p.name, "state": "applied", "detail": "ok"} for p in PATCHES[2:]]

    def check(sources: Any = None) -> dict[str, gdn_contract.Verdict]:
        seen.append(sources)
        verdicts = {link.name: gdn_contract.Verdict("pass", "fine") for link in GDN_CONTRACT}
        verdicts["ssm_dtype"] = gdn_contract.Verdict("unknown", "no --mamba-ssm-dtype given")
        return verdicts

    monkeypatch.setattr(cli, "verify_all", rows)
    monkeypatch.setattr(gdn_contract, "check", check)


def test_the_summary_does_not_claim_no_command_line_when_one_was_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Any] = []
    _fake_run(monkeypatch, seen)
    cli.main(["verify"])
    assert LEDGER_WHY in capsys.readouterr().err  # no command line: the ledger's reason holds
    cli.main(["verify", "--engine-args", "--model-path", "/m", "--tp-size", "2"])
    err = capsys.readouterr().err
    assert LEDGER_WHY not in err and "ssm_dtype: no --mamba-ssm-dtype given" in err, err
    assert list(seen[-1].argv) == ["--model-path", "/m", "--tp-size", "2"]


def test_its_own_model_and_dtype_flags_reach_the_contract(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Any] = []
    _fake_run(monkeypatch, seen)
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(cli.model_config, "read_model_config", lambda path: None)
    cli.main(["verify", "--model-path", str(tmp_path), "--mamba-ssm-dtype", "bfloat16"])
    capsys.readouterr()
    argv = ["--model-path", str(tmp_path), "--mamba-ssm-dtype", "bfloat16"]
    assert list(seen[-1].argv) == argv


def test_each_fact_once_and_a_progress_line_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_run(monkeypatch, [])
    cli.main(["verify"])
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines[0].startswith("qwen-npu patches verify: importing SGLang"), err
    missing = [r for r in out.splitlines() if "target-missing" in r]
    assert len(missing) == 2  # the table says each state once
    names = [line.split()[0] for line in missing]
    for name in names:  # and stderr names each once, with its next step
        assert sum(name in line for line in lines) == 1, err
    assert "event=" not in err


def test_log_lines_only_with_log(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The patches log while they apply (a WARNING here); the table already says it."""
    _fake_run(monkeypatch, [])
    rows = cli.verify_all

    def logging_rows() -> list[dict[str, Any]]:
        PartLog("patches")("warning", "patch.demo", patch="x")
        return rows()

    monkeypatch.setattr(cli, "verify_all", logging_rows)
    cli.main(["verify"])
    assert "event=patch.demo" not in capfd.readouterr().err
    cli.main(["verify", "--log"])
    assert "event=patch.demo" in capfd.readouterr().err
