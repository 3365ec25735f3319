"""The output-quality canary: one greedy request every N seconds, scored for garbled output.

Garbled output (the upstream PR's known limitation on Qwen3.6 NEXTN: a kernel that corrupted the
SSM state) fails no health check: the engine answers 200 with text that loops or drifts. The
scoring (docs/sidecar.md "Canary") works on word-level tokens, so the image needs no tokenizer.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qwen_npu.log import PartLog, RateLimiter
from qwen_npu.metrics.catalogue import CANARY_RESULTS
from qwen_npu.sidecar.engine_client import EngineError
from qwen_npu.sidecar.health import EngineStep, histogram

log = PartLog("sidecar")

GENERATE_PATH = "/generate"

_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|\w+|[^\w\s]")


def tokens(text: str) -> list[str]:
    """Word-level tokens: runs of word characters, single CJK characters, punctuation marks."""
    return _TOKEN.findall(text.lower())


def degeneration_score(toks: list[str], n: int = 3) -> float:
    """Share of repeated n-grams, 1 - distinct / total: 0.0 for varied text, near 1.0 for a loop."""
    grams = [tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)]
    if not grams:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def longest_repeat(toks: list[str], max_period: int = 16) -> int:
    """The longest stretch of one unit (1..max_period tokens) repeated back to back, ``"a b a b a
    b"`` -> 6."""
    best = 0
    for period in range(1, max_period + 1):
        run = 0
        for i in range(period, len(toks)):
            if toks[i] == toks[i - period]:
                run += 1
                if run >= period:
                    best = max(best, run + period)
            else:
                run = 0
    return best


def golden_prefix_chars(output: str, golden: str) -> int:
    """How many characters of the output match the golden output from the start."""
    return len(os.path.commonprefix([output, golden]))  # noqa: RUF071 (characters, not paths)


def golden_prefix_ratio(output: str, golden: str) -> float:
    """Matching characters from the start / golden length; 1.0 for an empty golden text."""
    if not golden:
        return 1.0
    return golden_prefix_chars(output, golden) / len(golden)


@dataclass(frozen=True)
class CanaryScore:
    tokens: int
    degeneration_score: float
    longest_repeat_tokens: int
    golden_prefix_ratio: float | None
    golden_prefix_chars: int | None = None

    def result(self, degeneration_max: float, golden_min_ratio: float) -> str:
        if self.degeneration_score > degeneration_max:
            return "degenerated"
        if self.golden_prefix_ratio is not None and self.golden_prefix_ratio < golden_min_ratio:
            return "golden_mismatch"
        return "ok"


def score(output: str, golden: str | None = None) -> CanaryScore:
    toks = tokens(output)
    return CanaryScore(
        tokens=len(toks),
        degeneration_score=degeneration_score(toks),
        longest_repeat_tokens=longest_repeat(toks),
        golden_prefix_ratio=None if golden is None else golden_prefix_ratio(output, golden),
        golden_prefix_chars=None if golden is None else golden_prefix_chars(output, golden),
    )


class CanaryRunner(EngineStep):
    """``await runner()`` runs one canary when the engine is ready and none is in flight."""

    def __init__(self, *view: Any, wall: Callable[[], float]) -> None:
        super().__init__(*view)
        self.wall = wall
        self.golden = self.settings.golden_text()
        self.runs: dict[str, int] = dict.fromkeys(CANARY_RESULTS, 0)
        self.scored: CanaryScore | None = None  # the last scored output (the gauges)
        self.last_success_ts = math.nan
        self.last: dict[str, Any] = {}  # the last run, for /status
        self.latency = histogram("canary_latency_seconds")
        self._lock = asyncio.Lock()
        self._log_limiter = RateLimiter(60.0)

    async def __call__(self) -> None:
        if not self.health.ready() or self._lock.locked():
            return
        async with self._lock:
            await self._once()

    async def _once(self) -> None:
        s = self.settings
        body = {
            "text": s.canary_prompt,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": s.canary_max_tokens},
        }
        t0 = self.clock()
        try:
            response = await self.engine().request(
                "POST", GENERATE_PATH, timeout=s.canary_timeout_s, json_body=body
            )
            text = response.json_object().get("text")
            if not isinstance(text, str):
                raise EngineError("malformed", "/generate answer has no string 'text'")
        except EngineError as exc:
            self.errors.count(exc, GENERATE_PATH)
            self.runs["error"] += 1
            self.last = {"result": "error", "error": str(exc), "at": self.wall()}
            return
        latency = self.clock() - t0
        self.latency.observe(latency)
        scored = score(text.strip(), self.golden)
        result = scored.result(s.canary_degeneration_max, s.canary_golden_min_ratio)
        self.runs[result] += 1
        self.scored = scored
        if result == "ok":
            self.last_success_ts = self.wall()
        elif self._log_limiter.allow(f"canary-{result}"):
            log(
                "warning",
                "canary_" + result,
                score=round(scored.degeneration_score, 3),
                longest_repeat=scored.longest_repeat_tokens,
                golden_prefix_ratio=scored.golden_prefix_ratio,
                output=text[:200],
                next="see docs/runbook.md#qwennpucanarydegenerated; "
                "if MTP is on, compare with make mtp-off",
            )
        self.last = {
            "result": result,
            "at": self.wall(),
            "latency_s": round(latency, 4),
            "tokens": scored.tokens,
            "degeneration_score": round(scored.degeneration_score, 4),
            "longest_repeat_tokens": scored.longest_repeat_tokens,
            "golden_prefix_ratio": scored.golden_prefix_ratio,
            "golden_prefix_chars": scored.golden_prefix_chars,
            "output_head": text[:200],
        }
