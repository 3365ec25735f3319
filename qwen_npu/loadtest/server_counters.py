"""Accept length over the measured phase, from the engine's counters scraped before and after.

sglang.benchmark.serving reads ``/server_info``'s lifetime average, which includes the warm-up and
every earlier run; generated tokens per verify call over the window is this run's alone.
"""

from __future__ import annotations

import requests
from prometheus_client.parser import text_string_to_metric_families

GENERATION_TOKENS = "sglang:generation_tokens_total"
SPEC_VERIFY_CALLS = "sglang:spec_verify_calls_total"


def parse_counters(text: str) -> dict[str, float]:
    """Each counter of interest summed over its label sets."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (GENERATION_TOKENS, SPEC_VERIFY_CALLS):
                totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


def scrape(base_url: str) -> dict[str, float] | None:
    """GET /metrics, parsed; None when it fails (the run goes on without an accept length)."""
    try:
        resp = requests.get(base_url.rstrip("/") + "/metrics", timeout=5)
        return parse_counters(resp.text) if resp.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None


def accept_length(before: dict[str, float] | None, after: dict[str, float] | None) -> float | None:
    """Generated tokens per verify call over the window; None without speculative counters."""
    if before is None or after is None:
        return None
    calls = after.get(SPEC_VERIFY_CALLS, 0.0) - before.get(SPEC_VERIFY_CALLS, 0.0)
    tokens = after.get(GENERATION_TOKENS, 0.0) - before.get(GENERATION_TOKENS, 0.0)
    return tokens / calls if calls > 0 and tokens > 0 else None
