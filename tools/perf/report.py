"""What the perf harnesses share: their report to out/perf/<part>.md and the terminal, and the
Prometheus text of the processes they measure."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

Metrics = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def write_report(out: Path, lines: Sequence[str]) -> int:
    text = "\n".join(lines)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return 0


def run(part: str, report: Callable[[], Sequence[str]], argv: list[str] | None = None) -> int:
    """A harness's entry point: ``report()``'s lines to ``--out`` (out/perf/<part>.md)."""
    parser = argparse.ArgumentParser(prog=f"python -m tools.perf.{part}")
    parser.add_argument("--out", type=Path, default=Path("out/perf") / f"{part}.md")
    return write_report(parser.parse_args(argv).out, report())


def parse_metrics(text: str) -> Metrics:
    """Prometheus text as {(name, sorted labels): value}."""
    # lazy: an extra's (pyproject.toml); the base install goes without
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): float(s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def total(m: Metrics, name: str, **labels: str) -> float:
    """The sum of ``name``'s series whose labels include ``labels``."""
    return sum(
        v
        for (n, ls), v in m.items()
        if n == name and all(dict(ls).get(k) == want for k, want in labels.items())
    )
