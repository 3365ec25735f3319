"""SGLang's own benchmark client runs against the simulator unmodified and sees its timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qwen_npu.sim.testing import running_sim
from tools.paths import REPO


def make_tokenizer(folder: Path, vocab_size: int = 2000) -> Path:
    """A local word-level tokenizer folder that transformers' AutoTokenizer loads offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<eos>": 1, **{f"w{i}": i for i in range(2, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "unk_token": "<unk>",
                "eos_token": "<eos>",
                "model_max_length": 1 << 20,
            }
        )
    )
    return folder


@pytest.mark.sglang
@pytest.mark.slow
def test_sglang_benchmark_serving_reports_the_configured_ttft_and_tpot(tmp_path: Path) -> None:
    tokenizer = make_tokenizer(tmp_path / "tok")
    out = tmp_path / "bench.jsonl"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": str(REPO / "tests" / "stubs"),
    }
    ttft_ms, itl_ms, accept = 60.0, 12.0, 2.0
    with running_sim(ttft_ms=ttft_ms, itl_ms=itl_ms, accept_length=accept, vocab_size=2000) as url:
        proc = subprocess.run(
            [
                sys.executable,
                "-W",
                "ignore",
                "-m",
                "sglang.benchmark.serving",
                "--backend",
                "sglang",
                "--base-url",
                url,
                "--model",
                "sim",
                "--tokenizer",
                str(tokenizer),
                "--dataset-name",
                "random-ids",
                "--tokenize-prompt",
                "--num-prompts",
                "12",
                "--random-input-len",
                "128",
                "--random-output-len",
                "60",
                "--random-range-ratio",
                "1.0",
                "--request-rate",
                "inf",
                "--max-concurrency",
                "2",
                "--output-file",
                str(out),
                "--disable-tqdm",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text().splitlines()[-1])
    assert result["completed"] == 12
    assert result["total_output_tokens"] == 12 * 60
    # Loose here (a shared 2-core machine); tight figures belong to `make perf-sim`.
    assert ttft_ms - 1 < result["median_ttft_ms"] < ttft_ms + 25
    # TPOT: one verify step of itl-ms yields `accept` tokens on average.
    expected_tpot = itl_ms / accept
    assert expected_tpot * 0.7 < result["median_tpot_ms"] < expected_tpot * 1.4
    # The benchmark reads /server_info's internal_states[0].avg_spec_accept_length.
    assert 1.5 < result["accept_length"] < 2.6
