"""The bench sends exactly NUM_PROMPTS measured requests plus one warm-up (issue 6).

Counted on the server side: a fresh simulator's ``sglang:num_requests_total`` and
``sglang:prompt_tokens_total`` after one bench run.
"""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest

from qwen_npu.sim.testing import running_sim

from .benchrun import bench

NUM, IN_LEN = 7, 16

pytestmark = pytest.mark.slow


def served(url: str, metric: str) -> float:
    """Sum of one counter over its label sets, read from the simulator's /metrics."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    pattern = rf"^sglang:{metric}(?:\{{[^}}]*\}})? ([0-9.eE+-]+)$"
    return sum(float(v) for v in re.findall(pattern, text, re.M))


@pytest.mark.parametrize(("extra", "sent"), [((), NUM + 1), (("--no-warmup",), NUM)])
def test_exactly_num_prompts_plus_one_warm_up_reach_the_server(
    tmp_path: Path, extra: tuple[str, ...], sent: int
) -> None:
    with running_sim(ttft_ms=5, itl_ms=1) as url:
        proc, recs = bench(
            url,
            tmp_path / "n.jsonl",
            "-c",
            "3",
            "--num-prompts",
            str(NUM),
            "--input-len",
            str(IN_LEN),
            "--output-len",
            "5",
            *extra,
        )
        assert proc.returncode == 0, proc.stderr
        assert served(url, "num_requests_total") == sent
        assert served(url, "prompt_tokens_total") == sent * IN_LEN
    (r,) = recs
    assert r["completed"] == NUM and r["total_input_tokens"] == NUM * IN_LEN
