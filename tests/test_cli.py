"""The one CLI: every verb is reachable, and a bad flag is one line naming the fix, exit 2."""

from __future__ import annotations

import pytest

from qwen_npu.cli import VERBS, main


def test_help_lists_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {verb}" in out for verb in VERBS)


def test_unknown_verb_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-verb"]) == 2
    assert "unknown verb 'no-such-verb'" in capsys.readouterr().err


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_bad_flag_is_one_line_with_the_help_pointer(
    verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([verb, "--no-such-flag"])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"qwen-npu {verb}: ")
    assert lines[0].endswith(f"see: qwen-npu {verb} --help")
