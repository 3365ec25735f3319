"""A run against a baseline JSONL (ours or sglang.benchmark.serving's: the keys are the same):
a figure worse by more than its threshold in % is a regression (docs/loadtest.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# key -> (direction, default threshold in %). "higher" = bigger is better.
DEFAULT_THRESHOLDS: dict[str, tuple[str, float]] = {
    "request_throughput": ("higher", 5.0),
    "output_throughput": ("higher", 5.0),
    "total_throughput": ("higher", 5.0),
    "mean_ttft_ms": ("lower", 10.0),
    "p99_ttft_ms": ("lower", 20.0),
    "mean_tpot_ms": ("lower", 10.0),
    "p99_tpot_ms": ("lower", 20.0),
    "mean_itl_ms": ("lower", 10.0),
    "mean_e2e_latency_ms": ("lower", 10.0),
}

MATCH_KEYS = ("max_concurrency", "random_input_len", "random_output_len")


@dataclass(frozen=True)
class Finding:
    """One compared metric: the change in % (positive = worse) against its threshold."""

    key: str
    baseline: float
    current: float
    worse_pct: float
    threshold_pct: float

    @property
    def regressed(self) -> bool:
        return self.worse_pct > self.threshold_pct

    def line(self) -> str:
        mark = "REGRESSION" if self.regressed else "ok"
        return (
            f"  {mark:<10} {self.key:<22} baseline={self.baseline:.3f} current={self.current:.3f} "
            f"worse_by={self.worse_pct:+.1f}% limit={self.threshold_pct:.1f}%"
        )


def parse_thresholds(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in DEFAULT_THRESHOLDS:
            known = ", ".join(DEFAULT_THRESHOLDS)
            raise ValueError(f"--threshold {item!r}: use key=percent with key one of: {known}")
        try:
            out[key] = float(value)
        except ValueError:
            raise ValueError(f"--threshold {item!r}: {value!r} is not a number") from None
    return out


def find_baseline(records: list[dict[str, Any]], current: dict[str, Any]) -> dict[str, Any] | None:
    """The last record run at the same concurrency and lengths as ``current``."""
    matches = [r for r in records if all(r.get(k) == current.get(k) for k in MATCH_KEYS)]
    return matches[-1] if matches else None


def compare(
    baseline: dict[str, Any], current: dict[str, Any], overrides: dict[str, float] | None = None
) -> list[Finding]:
    findings = []
    for key, (direction, default) in DEFAULT_THRESHOLDS.items():
        b, c = baseline.get(key), current.get(key)
        if not isinstance(b, int | float) or not isinstance(c, int | float) or b <= 0:
            continue
        change = (c - b) / b * 100.0
        worse = -change if direction == "higher" else change
        threshold = (overrides or {}).get(key, default)
        findings.append(Finding(key, float(b), float(c), worse, threshold))
    return findings
