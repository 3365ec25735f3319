"""Degeneration scoring and golden comparison of canary outputs."""

from __future__ import annotations

import pytest

from qwen_npu.sidecar import canary
from tests.sidecar.conftest import NORMAL_TEXT


def test_varied_text_scores_low_and_a_loop_scores_high() -> None:
    clean = canary.score(NORMAL_TEXT)
    loop = canary.score("The answer is " + "lo mi ne " * 20)
    assert clean.degeneration_score < 0.1
    assert clean.longest_repeat_tokens < 4
    assert loop.degeneration_score > 0.8
    assert loop.longest_repeat_tokens >= 57  # 20 x 3 tokens, minus nothing of the loop


def test_longest_repeat_counts_back_to_back_units() -> None:
    assert canary.longest_repeat(["a", "b", "a", "b", "a", "b"]) == 6
    assert canary.longest_repeat(["x", "a", "a", "a", "a", "y"]) == 4
    assert canary.longest_repeat(["a", "b", "c", "d"]) == 0
    assert (
        canary.longest_repeat(["a", "b", "c", "a", "b", "d"]) == 0
    )  # a repeat, but not back to back


def test_cjk_characters_are_tokens() -> None:
    assert canary.tokens("水星是最小的行星。") == list("水星是最小的行星。")
    assert canary.score("好好好好好好好好").degeneration_score > 0.8


def test_golden_prefix_ratio() -> None:
    assert canary.golden_prefix_ratio("abcdef", "abcdef") == 1.0
    assert canary.golden_prefix_ratio("abcxyz", "abcdef") == 0.5
    assert canary.golden_prefix_ratio("", "abcd") == 0.0
    assert canary.golden_prefix_ratio("abcdef and more", "abcdef") == 1.0


def test_golden_prefix_length() -> None:
    assert canary.golden_prefix_chars("abcxyz", "abcdef") == 3
    assert canary.golden_prefix_chars("abcdef and more", "abcdef") == 6
    assert canary.golden_prefix_chars("xbc", "abc") == 0
    assert canary.score("abcxyz", "abcdef").golden_prefix_chars == 3
    assert canary.score("abcxyz").golden_prefix_chars is None


@pytest.mark.parametrize(
    ("output", "golden", "expected"),
    [
        (NORMAL_TEXT, None, "ok"),
        (NORMAL_TEXT, NORMAL_TEXT, "ok"),
        (NORMAL_TEXT, "Pluto " + NORMAL_TEXT, "golden_mismatch"),
        ("ka " * 50, None, "degenerated"),
        ("ka " * 50, NORMAL_TEXT, "degenerated"),
    ],
)
def test_result_label(output: str, golden: str | None, expected: str) -> None:
    assert canary.score(output, golden).result(0.5, 0.5) == expected


def test_empty_output_is_not_degenerated() -> None:
    empty = canary.score("")
    assert (empty.tokens, empty.degeneration_score, empty.longest_repeat_tokens) == (0, 0.0, 0)
