"""Accept length over the run, from the engine's own counters scraped before and after.

sglang.benchmark.serving reads ``/server_info``'s ``avg_spec_accept_length``, a lifetime average
that includes the warm-up and every earlier run. We scrape ``/metrics`` before and after the
measured phase and divide the growth of ``sglang:generation_tokens_total`` by the growth of
``sglang:spec_verify_calls_total`` (tokens per verify step = the accept length of that window).
"""

from __future__ import annotations

from dataclasses import dataclass

import requests
from prometheus_client.parser import text_string_to_metric_families

GENERATION_TOKENS = "sglang:generation_tokens_total"
SPEC_VERIFY_CALLS = "sglang:spec_verify_calls_total"
PROMPT_TOKENS = "sglang:prompt_tokens_total"
COUNTERS = (GENERATION_TOKENS, SPEC_VERIFY_CALLS, PROMPT_TOKENS)


@dataclass(frozen=True)
class CounterSnapshot:
    """Counter totals (summed over label sets) at one moment; ``None`` when /metrics failed."""

    values: dict[str, float] | None
    error: str = ""


def parse_counters(text: str) -> dict[str, float]:
    """Sum each counter of interest over its label sets (tp ranks report the same totals once)."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in COUNTERS:
                totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


def scrape(base_url: str, timeout_s: float = 5.0) -> CounterSnapshot:
    """GET /metrics and parse it; failures come back as an error, never an exception."""
    try:
        resp = requests.get(base_url.rstrip("/") + "/metrics", timeout=timeout_s)
        if resp.status_code != 200:
            return CounterSnapshot(None, f"/metrics answered HTTP {resp.status_code}")
        return CounterSnapshot(parse_counters(resp.text))
    except requests.RequestException as exc:
        return CounterSnapshot(None, f"/metrics unreachable ({type(exc).__name__})")
    except ValueError as exc:
        return CounterSnapshot(None, f"/metrics malformed ({exc})")


def accept_length(before: CounterSnapshot, after: CounterSnapshot) -> float | None:
    """Generated tokens per verify call over the window; None without speculative counters."""
    if before.values is None or after.values is None:
        return None
    calls = after.values.get(SPEC_VERIFY_CALLS, 0.0) - before.values.get(SPEC_VERIFY_CALLS, 0.0)
    tokens = after.values.get(GENERATION_TOKENS, 0.0) - before.values.get(GENERATION_TOKENS, 0.0)
    if calls <= 0 or tokens <= 0:
        return None
    return tokens / calls
