"""Speculative-decoding acceptance over a sliding window, from SGLang's own counters.

Why this exists: SGLang's ``sglang:spec_accept_length`` gauge is the last batch's value and
``/server_info``'s ``avg_spec_accept_length`` is a lifetime average, so neither shows a collapse
that started ten minutes ago. The window uses the two counters SGLang increments when a request
finishes: tokens per verify = delta ``sglang:generation_tokens_total`` / delta
``sglang:spec_verify_calls_total`` (bonus token included, as SGLang's per-request
``spec_accept_length``), and the acceptance rate = (length - 1) / (draft tokens per verify - 1),
SGLang's ``accepted drafts / proposed drafts``.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

GENERATION_TOKENS = "sglang:generation_tokens"  # the parser drops the counter's _total
SPEC_VERIFY_CALLS = "sglang:spec_verify_calls"
_WANTED = (GENERATION_TOKENS, SPEC_VERIFY_CALLS)
# One sample line of the text format: name, optional {labels}, value, optional timestamp.
_SAMPLE = re.compile(
    r'[a-zA-Z_:][a-zA-Z0-9_:]*(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?[ \t]+(\S+)([ \t]+-?\d+)?'
)


class MetricsFormatError(ValueError):
    """The engine's /metrics text is not valid Prometheus exposition format."""


@dataclass(frozen=True)
class SpecCounters:
    generation_tokens: float
    verify_calls: float


def parse_spec_counters(text: str) -> SpecCounters | None:
    """Sum both counters over all their series; None when the engine exports neither.

    Every sample line is checked for shape (a broken page is an error even when the two counters
    are fine: it means the engine's exporter is broken); only the two families' lines are handed
    to prometheus_client's parser, so a large /metrics page costs a line scan, not a full parse.
    """
    lines: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("#"):
            if any(line.startswith(("# HELP " + n, "# TYPE " + n)) for n in _WANTED):
                lines.append(line)
            continue
        match = _SAMPLE.fullmatch(line.rstrip())
        if match is None or not _is_float(match.group(2)):
            raise MetricsFormatError(f"line {number} is not a sample: {line[:80]!r}")
        if line.startswith(_WANTED):
            lines.append(line)
    totals = dict.fromkeys(_WANTED, 0.0)
    seen = False
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            base = family.name.removesuffix("_total")  # untyped families keep the suffix
            if base not in totals:
                continue
            for sample in family.samples:
                if sample.name.endswith("_total") or sample.name == family.name:
                    if not math.isfinite(sample.value) or sample.value < 0:
                        raise MetricsFormatError(f"{sample.name} = {sample.value}")
                    totals[base] += sample.value
                    seen = True
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsFormatError(str(exc)) from None
    if not seen:
        return None
    return SpecCounters(totals[GENERATION_TOKENS], totals[SPEC_VERIFY_CALLS])


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class SpecWindow:
    """Samples of both counters over time; the window's rates come from its oldest and newest."""

    def __init__(self, window_s: float, max_samples: int = 4096) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, SpecCounters]] = deque(maxlen=max_samples)
        self.resets = 0

    def add(self, now: float, counters: SpecCounters) -> None:
        if self._samples:
            last = self._samples[-1][1]
            if (
                counters.generation_tokens < last.generation_tokens
                or counters.verify_calls < last.verify_calls
            ):
                # Counters went down: the engine restarted. Older samples mean nothing now.
                self._samples.clear()
                self.resets += 1
        self._samples.append((now, counters))
        while len(self._samples) > 1 and self._samples[1][0] <= now - self.window_s:
            self._samples.popleft()

    def clear(self) -> None:
        self._samples.clear()

    def accept_length(self) -> float:
        """Tokens per verify over the window; NaN when no verify happened in it."""
        if len(self._samples) < 2:
            return math.nan
        first, last = self._samples[0][1], self._samples[-1][1]
        verifies = last.verify_calls - first.verify_calls
        if verifies <= 0:
            return math.nan
        return (last.generation_tokens - first.generation_tokens) / verifies

    def accept_rate(self, num_draft_tokens: float) -> float:
        """Accepted share of the proposed drafts; NaN when unknown."""
        length = self.accept_length()
        if math.isnan(length) or not num_draft_tokens > 1:
            return math.nan
        return min(1.0, max(0.0, (length - 1.0) / (num_draft_tokens - 1.0)))

    def span_s(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        return self._samples[-1][0] - self._samples[0][0]
