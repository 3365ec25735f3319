"""The accuracy claim on a synthetic GSM8K-format set, against servers that answer from a table.

The scorer (the number after ``####``, else the last number), the Wilson interval against its
textbook value, the user's threshold, the paired comparison with a second side, and a bad file
refused in one line (exit 2) before any request.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from qwen_npu.cli import main as qwen_npu
from qwen_npu.qualify.claims import accuracy
from qwen_npu.qualify.client import Endpoint

from ..conftest import Answerer, claim, report

SHOTS, QUESTIONS = 3, 15


def _gsm8k(path: Path) -> dict[str, str]:
    """A GSM8K-format file; question -> the right number."""
    table = {}
    with path.open("w") as fh:
        for i in range(SHOTS + QUESTIONS):
            q = f"Tom has {i + 3} apples and buys {2 * i + 1} more. How many apples now?"
            answer = 3 * i + 4
            fh.write(json.dumps({"question": q, "answer": f"{i + 3} + {2 * i + 1} = "
                                 f"{answer}\n#### {answer:,}"}) + "\n")  # fmt: skip
            table[q] = str(answer)
    return table


def _table_answerer(table: dict[str, str], wrong: set[int]) -> Answerer:
    """Answers the prompt's last question from the table; the questions numbered in ``wrong``
    (0-based, scored ones) get a wrong number. Alternates the two answer shapes."""
    order = list(table)

    def answer(prompt: str, n: int) -> str:
        question = re.findall(r"Question: (.*)\n", prompt)[-1]
        i = order.index(question) - SHOTS
        value = int(table[question]) + (1 if i in wrong else 0)
        return f"Adding gives {value}.\n#### {value}" if i % 2 else f"So the total is {value}."

    return answer


@pytest.fixture
def eval_file(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "gsm8k.jsonl"
    return path, _gsm8k(path)


def test_the_scorer_reads_the_final_number_or_the_last_one() -> None:
    assert accuracy.extract("12 + 30 = 42\n#### 42") == "42"
    assert accuracy.extract("first 3 then #### 1,234.\nQuestion: 7") == "1234"
    assert accuracy.extract("It is 5, or maybe 6.0 apples") == "6"
    assert accuracy.extract("no number") is None
    assert accuracy.normalise("1,000.50") == "1000.5"


def test_the_wilson_interval_is_the_textbooks() -> None:
    lo, hi = accuracy.wilson(8, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.4902, 0.9433)
    assert accuracy.wilson(0, 10)[0] == 0.0 and math.isclose(accuracy.wilson(10, 10)[1], 1.0)


def test_scored_against_a_table_server_with_interval_and_threshold(
    fixture_server: Callable[[Answerer], str], eval_file: tuple[Path, dict[str, str]]
) -> None:
    path, table = eval_file
    url = fixture_server(_table_answerer(table, wrong={0, 5, 9}))
    got = accuracy.run(Endpoint(url), path, shots=SHOTS, min_accuracy=0.9)
    assert got.data["target"]["correct"] == QUESTIONS - 3
    assert got.data["shots"] == SHOTS and got.data["questions"] == QUESTIONS
    lo, hi = got.data["target"]["wilson95"]
    assert lo < 0.8 < hi and (lo, hi) == accuracy.wilson(12, 15)
    assert got.verdict == "fail"  # 0.8 < --min-accuracy 0.9
    assert got.summary.startswith("12/15 = 0.800 (95% Wilson ")
    assert accuracy.run(Endpoint(url), path, shots=SHOTS, min_accuracy=0.8).verdict == "pass"


def test_paired_against_the_compare_side(
    fixture_server: Callable[[Answerer], str], eval_file: tuple[Path, dict[str, str]]
) -> None:
    path, table = eval_file
    right = fixture_server(_table_answerer(table, wrong=set()))
    a_bit_worse = fixture_server(_table_answerer(table, wrong={1, 7}))
    much_worse = fixture_server(_table_answerer(table, wrong=set(range(0, 15, 2))))
    near = accuracy.run(Endpoint(a_bit_worse), path, shots=SHOTS, compare_to=Endpoint(right))
    mean, (d_lo, d_hi) = (near.data["compare"]["paired_difference"][k] for k in ("mean", "ci95"))
    assert math.isclose(mean, -2 / 15) and d_lo < 0 < d_hi
    assert near.verdict == "pass"  # within the interval: not shown worse
    far = accuracy.run(Endpoint(much_worse), path, shots=SHOTS, compare_to=Endpoint(right))
    assert far.data["compare"]["paired_difference"]["ci95"][1] < 0
    assert far.verdict == "fail"
    failing = {c.name: c for c in far.checks}["no worse than the compare side"]
    assert failing.evidence.startswith("target 7/15 vs compare 15/15: paired difference -0.533")


def test_the_verb_writes_the_accuracy_claim(
    fixture_server: Callable[[Answerer], str],
    eval_file: tuple[Path, dict[str, str]],
    tmp_path: Path,
) -> None:
    path, table = eval_file
    url = fixture_server(_table_answerer(table, wrong=set()))
    out = tmp_path / "out"
    status = qwen_npu(["qualify", "--target", url, "--claims", "accuracy", "--eval", str(path),
                       "--eval-shots", str(SHOTS), "--output-dir", str(out)])  # fmt: skip
    assert status == 0
    got = claim(report(out), "accuracy")
    assert got["verdict"] == "pass" and got["data"]["target"]["accuracy"] == 1.0


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("not json\n", "line 1 is not JSON"),
        ('{"question": "q", "answer": "no final number"}\n', "has no '#### <number>'"),
        ('{"q": 1}\n', "needs string keys 'question' and 'answer'"),
        ('{"question": "q", "answer": "#### 1"}\n', "1 questions, but 5 are few-shot"),
    ],
)
def test_a_bad_eval_file_is_one_line_and_exit_2(
    tmp_path: Path, content: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    status = qwen_npu(["qualify", "--target", "http://127.0.0.1:9", "--eval", str(path),
                       "--output-dir", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err
    assert not (tmp_path / "out" / "report.json").exists()  # refused before anything ran
