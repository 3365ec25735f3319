"""The one CLI: every verb is reachable, and a bad flag is one line naming the fix, exit 2."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from qwen_npu.cli import VERBS, main
from tools.paths import REPO


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


#: `qwen-npu <verb>` as a command: in backticks or quotes, at the start of a message or line,
#: after a path (`.venv/bin/qwen-npu sim`), "run", "(" or "see:". Prose ("the qwen-npu chart")
#: does not count.
COMMAND = re.compile(r"(?:^|[`'\"(/]|\brun |\bsee:? )qwen-npu ([a-z][a-z0-9-]*)", re.M)


def _verb_mentions(text: str) -> list[str]:
    return COMMAND.findall(text)


def _messages(path: Path) -> list[str]:
    """Every string a module holds (messages, help, docstrings; f-strings' literal parts)."""
    tree = ast.parse(path.read_text())
    return [
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def test_every_message_that_names_a_verb_names_a_registered_one() -> None:
    sources = [*REPO.glob("qwen_npu/**/*.py"), *REPO.glob("tools/**/*.py")]
    named: dict[str, set[str]] = {}
    for path in sources:
        for text in _messages(path):
            for verb in _verb_mentions(text):
                named.setdefault(verb, set()).add(str(path.relative_to(REPO)))
    for path in [REPO / "Makefile", *REPO.glob("mk/*.mk")]:
        for verb in _verb_mentions(path.read_text()):
            named.setdefault(verb, set()).add(str(path.relative_to(REPO)))
    unknown = {verb: sorted(where) for verb, where in named.items() if verb not in VERBS}
    assert not unknown, f"messages name verbs qwen_npu/cli.py does not register: {unknown}"
    assert {"bench-compare", "mtp-tune", "oncall"} <= named.keys()  # the walk sees the messages


def test_the_walk_catches_a_verb_that_does_not_exist() -> None:
    text = "run `qwen-npu bench-comapre --a X`; see qwen-npu sim --help; the qwen-npu chart"
    assert _verb_mentions(text) == ["bench-comapre", "sim"]
    assert _verb_mentions("qwen-npu mtp-tun: bad flag") == ["mtp-tun"]
    assert "bench-comapre" not in VERBS
