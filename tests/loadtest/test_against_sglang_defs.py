"""Our dataset and metrics against SGLang's own functions (sglang.benchmark from the wheel)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qwen_npu.loadtest.backends import RequestOutput
from qwen_npu.loadtest.dataset import DatasetConfig, load, vocab_size_from_tokenizer
from qwen_npu.loadtest.metrics import calculate_metrics

pytestmark = pytest.mark.sglang


@pytest.fixture(scope="module")
def hf_tokenizer(tokenizer_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir))


@pytest.mark.parametrize(
    ("num", "in_len", "out_len", "ratio", "seed"),
    [(100, 1024, 100, 1.0, 42), (37, 300, 50, 0.25, 7), (5, 16, 4, 0.0, 1234)],
)
def test_random_ids_match_sglang(
    hf_tokenizer: Any,
    tokenizer_dir: Path,
    num: int,
    in_len: int,
    out_len: int,
    ratio: float,
    seed: int,
) -> None:
    from sglang.benchmark.datasets.random import sample_random_requests

    random.seed(seed)
    np.random.seed(seed)
    theirs = sample_random_requests(
        input_len=in_len,
        output_len=out_len,
        num_prompts=num,
        range_ratio=ratio,
        tokenizer=hf_tokenizer,
        dataset_path="",
        random_sample=False,
        return_text=False,
    )
    vocab = vocab_size_from_tokenizer(tokenizer_dir)
    assert vocab == hf_tokenizer.vocab_size
    ours = load(DatasetConfig(num, in_len, out_len, ratio, seed, vocab))
    assert len(ours) == len(theirs) == num
    for a, b in zip(ours, theirs, strict=True):
        assert a.prompt == b.prompt
        assert (a.prompt_len, a.output_len) == (b.prompt_len, b.output_len)


def _synthetic_outputs(n: int, rng: np.random.Generator) -> list[RequestOutput]:
    outs = []
    t = 1000.0
    for i in range(n):
        out_len = int(rng.integers(1, 12))
        ttft = float(rng.uniform(0.02, 0.3))
        itl = [float(x) for x in rng.uniform(0.005, 0.05, size=out_len - 1)]
        latency = ttft + sum(itl) + float(rng.uniform(0, 0.002))
        ok = i % 7 != 3
        outs.append(
            RequestOutput(
                index=i,
                success=ok,
                prompt_len=int(rng.integers(10, 50)),
                output_len=out_len if ok else 0,
                start_time=t,
                ttft=ttft if ok else 0.0,
                latency=latency if ok else 0.0,
                itl=itl if ok else [],
                error="" if ok else "HTTP 500",
            )
        )
        t += float(rng.uniform(0.0, 0.4))
    return outs


def test_metrics_match_sglang_calculate_metrics() -> None:
    import sglang.benchmark.serving as sb
    from sglang.benchmark.datasets.common import DatasetRow

    class CountingTokenizer:
        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return [0] * len(text.split())

    outs = _synthetic_outputs(60, np.random.default_rng(3))
    rows = [DatasetRow(prompt=[1], prompt_len=o.prompt_len, output_len=5) for o in outs]
    theirs_out = []
    for o in outs:
        t = sb.RequestFuncOutput()
        t.success, t.latency, t.ttft, t.itl = o.success, o.latency, o.ttft, list(o.itl)
        t.output_len, t.start_time, t.prompt_len = o.output_len, o.start_time, o.prompt_len
        t.generated_text = "w " * o.output_len
        theirs_out.append(t)
    duration = 25.0
    theirs, _ = sb.calculate_metrics(
        rows, theirs_out, duration, CountingTokenizer(), "sglang", accept_length=None
    )
    ours = calculate_metrics(outs, duration)
    assert ours["completed"] == theirs.completed
    assert ours["total_input_tokens"] == theirs.total_input
    assert ours["total_output_tokens"] == theirs.total_output
    for key in (
        "request_throughput",
        "input_throughput",
        "output_throughput",
        "total_throughput",
        "concurrency",
        "max_output_tokens_per_s",
        "max_concurrent_requests",
    ):
        assert ours[key] == pytest.approx(getattr(theirs, key), rel=1e-9), key
    for series in ("e2e_latency", "ttft", "tpot", "itl"):
        for stat in ("mean", "median", "std", "p90", "p95", "p99"):
            key = f"{stat}_{series}_ms"
            assert ours[key] == pytest.approx(getattr(theirs, key), rel=1e-9), key
    assert ours["max_itl_ms"] == pytest.approx(theirs.max_itl_ms)
