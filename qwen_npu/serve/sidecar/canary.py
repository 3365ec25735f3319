"""The output-quality canary: score one greedy output for degeneration and against a golden text.

Why this exists: the upstream pull request lists garbled speculative output on Qwen3.6-35B-A3B
NEXTN as a known limitation (a kernel that corrupted the SSM state). Garbled output does not fail a
health check: the engine answers 200 with text that loops or drifts. One fixed greedy request every
N seconds, scored here, makes it a metric.

Scoring works on word-level tokens (words, single CJK characters, punctuation marks) so it needs
no tokenizer in the sidecar image:

- degeneration score: the share of repeated 3-grams, 1 - distinct / total (0 for varied text,
  close to 1 when the output is one phrase over and over);
- longest repeat: the longest stretch of tokens that is a unit of 1..16 tokens repeated at least
  twice back to back (``"a b a b a b"`` -> 6);
- golden prefix ratio: characters of the output that match the golden output from the start,
  divided by the golden length (1.0 = identical start to end of the golden text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|\w+|[^\w\s]")
NGRAM = 3
MAX_PERIOD = 16


def tokens(text: str) -> list[str]:
    """Word-level tokens: runs of word characters, single CJK characters, punctuation marks."""
    return _TOKEN.findall(text.lower())


def degeneration_score(toks: list[str], n: int = NGRAM) -> float:
    """Share of repeated n-grams: 0.0 when all distinct (or too short), near 1.0 for one loop."""
    grams = [tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)]
    if not grams:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def longest_repeat(toks: list[str], max_period: int = MAX_PERIOD) -> int:
    """Length of the longest stretch made of one unit (1..max_period tokens) repeated >= twice."""
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
    match = 0
    for a, b in zip(output, golden, strict=False):
        if a != b:
            break
        match += 1
    return match


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
        """``degenerated``, ``golden_mismatch`` or ``ok`` (the label of canary_runs_total)."""
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
