"""The arithmetic of a comparison: spreads over repeats, verdicts, the tables, the crossover.

Pure (no I/O, no locust), so the rules are tested on hand-made records. A figure's spread is the
range (min..max) of its repeats around their median; a verdict only where two ranges do not
overlap (docs/loadtest.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# (JSONL key, table label, which direction is better)
METRICS: tuple[tuple[str, str, str], ...] = (
    ("output_throughput", "Output tok/s", "higher"),
    ("mean_tpot_ms", "Mean TPOT ms", "lower"),
    ("mean_ttft_ms", "Mean TTFT ms", "lower"),
    ("mean_e2e_latency_ms", "Mean E2E ms", "lower"),
)
HEADLINE = "output_throughput"  # higher is better


@dataclass(frozen=True)
class Spread:
    median: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(float(statistics.median(values)), min(values), max(values), len(values))

    def cell(self) -> str:
        if self.n < 2:
            return f"{self.median:.1f}"
        return f"{self.median:.1f} ({self.lo:.1f}..{self.hi:.1f})"


def beats(x: Spread, y: Spread, better: str) -> bool:
    """Every repeat of x is better than every repeat of y (needs 2+ repeats each)."""
    if x.n < 2 or y.n < 2:
        return False
    return x.lo > y.hi if better == "higher" else x.hi < y.lo


def verdict(a: Spread, b: Spread, better: str, label_a: str, label_b: str) -> str:
    if a.n < 2 or b.n < 2:
        return "no spread (1 repeat)"
    if beats(a, b, better):
        return f"{label_a} better"
    if beats(b, a, better):
        return f"{label_b} better"
    return "within spread"


@dataclass
class Cell:
    """Every figure of one side at one concurrency."""

    label: str
    figures: dict[str, Spread]
    accept_length: float | None
    runs: int
    failed_runs: int


def summarize(
    records: Sequence[dict[str, Any]], labels: Sequence[str]
) -> dict[int, dict[str, Cell]]:
    """conc -> label -> Cell, from JSONL records carrying ``compare_label``; a side's failed runs
    are left out of its figures unless every run failed."""
    out: dict[int, dict[str, Cell]] = {}
    for conc in sorted({int(r["max_concurrency"]) for r in records}):
        out[conc] = {}
        for label in labels:
            recs = [
                r
                for r in records
                if int(r["max_concurrency"]) == conc and r.get("compare_label") == label
            ]
            if not recs:
                continue
            good = [r for r in recs if r.get("verdict") == "pass"] or recs
            accepts = [float(r["accept_length"]) for r in good if r.get("accept_length")]
            out[conc][label] = Cell(
                label,
                {key: Spread.of([float(r[key]) for r in good]) for key, _, _ in METRICS},
                float(statistics.median(accepts)) if accepts else None,
                len(recs),
                sum(1 for r in recs if r.get("verdict") != "pass"),
            )
    return out


def format_pair(cells: dict[str, Cell], label_a: str, label_b: str) -> str:
    """The table of one concurrency for two sides: medians (min..max), B vs A, verdict."""
    a, b = cells[label_a], cells[label_b]
    rows = [["Metric", label_a, label_b, f"{label_b} vs {label_a}", "verdict"]]
    for key, title, better in METRICS:
        fa, fb = a.figures[key], b.figures[key]
        pct = f"{(fb.median - fa.median) / fa.median * 100:+.1f}%" if fa.median else "-"
        rows.append([title, fa.cell(), fb.cell(), pct, verdict(fa, fb, better, label_a, label_b)])
    rows.append(
        ["Accept length", _acc(a.accept_length), _acc(b.accept_length), "", "engine counters"]
    )
    rows.append(["Runs (with failures)", _runs(a), _runs(b), "", ""])
    return grid(rows)


def format_many(cells: dict[str, Cell], labels: Sequence[str]) -> str:
    """The table of one concurrency for any number of sides: medians (min..max) per figure."""
    present = [cells[label] for label in labels if label in cells]
    rows = [["Metric", *(c.label for c in present)]]
    rows += [[title, *(c.figures[key].cell() for c in present)] for key, title, _ in METRICS]
    rows.append(["Accept length", *(_acc(c.accept_length) for c in present)])
    rows.append(["Runs (with failures)", *(_runs(c) for c in present)])
    return grid(rows)


def _runs(cell: Cell) -> str:
    return f"{cell.runs} ({cell.failed_runs})"


def _acc(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def grid(rows: list[list[str]]) -> str:
    """A text table: the first column left-aligned, the others right-aligned, a rule under row 0."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        tail = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join([row[0].ljust(widths[0]), *tail]).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def crossover(summary: dict[int, dict[str, Cell]], label_on: str, label_off: str) -> int | None:
    """The lowest concurrency at which ``label_off`` beats ``label_on`` in output tok/s beyond the
    spread."""
    for conc in sorted(summary):
        on, off = summary[conc].get(label_on), summary[conc].get(label_off)
        if on and off and beats(off.figures[HEADLINE], on.figures[HEADLINE], "higher"):
            return conc
    return None


@dataclass(frozen=True)
class Pick:
    """The best setting at one concurrency, and how sure the measurement is of it."""

    conc: int
    best: str
    runner_up: str | None
    margin_pct: float  # best's median over the runner-up's, in percent
    separated: bool  # every repeat of best beat every repeat of the runner-up

    def evidence(self, summary: dict[int, dict[str, Cell]]) -> str:
        cells = summary[self.conc]
        text = f"CONC {self.conc}: {self.best} {cells[self.best].figures[HEADLINE].cell()} tok/s"
        if self.runner_up is None:
            return text
        r = cells[self.runner_up].figures[HEADLINE]
        sure = "beyond the spread" if self.separated else "within the spread"
        return f"{text} vs {self.runner_up} {r.cell()} ({self.margin_pct:+.1f}%, {sure})"


def pick(summary: dict[int, dict[str, Cell]], conc: int) -> Pick:
    """The side with the best median output tok/s at ``conc``, against the next best."""
    ranked = sorted(summary[conc].values(), key=lambda c: -c.figures[HEADLINE].median)
    best = ranked[0].figures[HEADLINE]
    if len(ranked) == 1:
        return Pick(conc, ranked[0].label, None, 0.0, False)
    second = ranked[1].figures[HEADLINE]
    margin = (best.median - second.median) / second.median * 100 if second.median else 0.0
    separated = beats(best, second, "higher")
    return Pick(conc, ranked[0].label, ranked[1].label, margin, separated)
