"""Accept length from counter deltas, dataset validation and the CLI's one-line input errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from qwen_npu.loadtest import cli
from qwen_npu.loadtest.dataset import DatasetConfig, load, vocab_size_from_tokenizer
from qwen_npu.loadtest.server_counters import accept_length, parse_counters

EXPOSITION = """\
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{model_name="m",tp_rank="0"}} {gen}
# HELP sglang:spec_verify_calls_total Number of speculative verify calls.
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{{model_name="m",tp_rank="0"}} {calls}
# HELP sglang:num_running_reqs running
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="m"}} 3
"""


def test_accept_length_is_the_delta_over_the_window() -> None:
    # Lifetime: 1000 tokens / 1000 calls (accept 1.0); during the run 3000 / 1000 = 3.0.
    before = parse_counters(EXPOSITION.format(gen=1000, calls=1000))
    after = parse_counters(EXPOSITION.format(gen=4000, calls=2000))
    assert accept_length(before, after) == pytest.approx(3.0)


def test_accept_length_is_none_without_spec_counters_or_scrape() -> None:
    plain = parse_counters(EXPOSITION.format(gen=10, calls=0))
    assert accept_length(plain, plain) is None
    assert accept_length(None, plain) is None


def test_a_missing_tokenizer_names_the_fix(tmp_path: Path) -> None:
    # The dataset's numbers are refused by the flags' types (test_cli_bad_input_is_one_line).
    with pytest.raises(ValueError, match="--vocab-size"):
        vocab_size_from_tokenizer(tmp_path)


def test_same_seed_same_ids_other_seed_other_ids() -> None:
    a = load(DatasetConfig(num_prompts=3, input_len=8, seed=1))
    b = load(DatasetConfig(num_prompts=3, input_len=8, seed=1))
    c = load(DatasetConfig(num_prompts=3, input_len=8, seed=2))
    assert a == b and a != c
    assert all(len(r.prompt) == 8 and r.output_len == 100 for r in a)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--concurrency", "0"], "argument --concurrency/-c: 0 is not"),
        (["-c", "0"], "argument --concurrency/-c: 0 is not"),
        (["--num-prompts", "0"], "argument --num-prompts: 0 is not"),
        (["--vocab-size", "0"], "argument --vocab-size: 0 is not"),
        (["--vocab-size", "1"], "argument --vocab-size: 1 is not"),
        (["--ready-timeout", "-5"], "argument --ready-timeout: -5 is not"),
        (["--target", "127.0.0.1:30000"], "--target 127.0.0.1:30000"),
        (["--sweep", "1 x"], '--sweep "1 x"'),
        (["--sweep", "0 5"], '--sweep "0 5"'),
        (["--threshold", "bogus=1"], "--threshold"),
        (["--baseline", "/nonexistent/base.jsonl"], "base.jsonl"),
        (["--tokenizer", "/nonexistent"], "tokenizer.json"),
        (["--ramp-ms-per-user", "-1"], "--ramp-ms-per-user"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # the parser's refusal
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err
