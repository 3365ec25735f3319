"""The arithmetic of a comparison: spreads over repeats, verdicts, the table, the crossover.

Pure (no I/O, no locust), so the rules are tested on hand-made records. Each side ran the same
dataset ``repeats`` times per concurrency; a figure's spread is the range of its repeats (min..max)
around their median. A verdict is given only where the two ranges do not overlap: every repeat of
one side beat every repeat of the other. With one repeat there is no spread and so no verdict.
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
HEADLINE = "output_throughput"


@dataclass(frozen=True)
class Spread:
    """One figure of one side at one concurrency over its repeats."""

    median: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no values to summarise")
        return cls(float(statistics.median(values)), min(values), max(values), len(values))

    def cell(self, fmt: str = "{:.1f}") -> str:
        if self.n < 2:
            return fmt.format(self.median)
        return f"{fmt.format(self.median)} ({fmt.format(self.lo)}..{fmt.format(self.hi)})"


def beats(x: Spread, y: Spread, better: str) -> bool:
    """Every repeat of x is better than every repeat of y (needs 2+ repeats each)."""
    if x.n < 2 or y.n < 2:
        return False
    return x.lo > y.hi if better == "higher" else x.hi < y.lo


def verdict(a: Spread, b: Spread, better: str, label_a: str, label_b: str) -> str:
    """``<label> better``, ``within spread`` or ``no spread (1 repeat)``."""
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
    conc: int
    figures: dict[str, Spread]
    accept_length: float | None
    runs: int
    failed_runs: int


def summarize(
    records: Sequence[dict[str, Any]], labels: Sequence[str]
) -> dict[int, dict[str, Cell]]:
    """conc -> label -> Cell, from JSONL records carrying ``compare_label``."""
    out: dict[int, dict[str, Cell]] = {}
    concs = sorted({int(r["max_concurrency"]) for r in records})
    for conc in concs:
        row: dict[str, Cell] = {}
        for label in labels:
            recs = [
                r
                for r in records
                if int(r["max_concurrency"]) == conc and r.get("compare_label") == label
            ]
            if not recs:
                continue
            good = [r for r in recs if r.get("verdict") == "pass"] or recs
            figures = {key: Spread.of([float(r[key]) for r in good]) for key, _, _ in METRICS}
            accepts = [float(r["accept_length"]) for r in good if r.get("accept_length")]
            row[label] = Cell(
                label,
                conc,
                figures,
                float(statistics.median(accepts)) if accepts else None,
                len(recs),
                sum(1 for r in recs if r.get("verdict") != "pass"),
            )
        out[conc] = row
    return out


def _pct(a: float, b: float) -> str:
    return f"{(b - a) / a * 100:+.1f}%" if a else "-"


def format_pair(cells: dict[str, Cell], label_a: str, label_b: str) -> str:
    """The table of one concurrency for two sides: medians (min..max), B vs A, verdict."""
    a, b = cells[label_a], cells[label_b]
    rows = [["Metric", label_a, label_b, f"{label_b} vs {label_a}", "verdict"]]
    for key, title, better in METRICS:
        fa, fb = a.figures[key], b.figures[key]
        rows.append(
            [
                title,
                fa.cell(),
                fb.cell(),
                _pct(fa.median, fb.median),
                verdict(fa, fb, better, label_a, label_b),
            ]
        )
    acc = [_acc(a.accept_length), _acc(b.accept_length)]
    rows.append(["Accept length", *acc, "", "engine counters"])
    rows.append(["Runs (with failures)", _runs(a), _runs(b), "", ""])
    return _grid(rows)


def _runs(cell: Cell) -> str:
    return f"{cell.runs} ({cell.failed_runs})"


def _acc(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _grid(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        tail = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        cells = [row[0].ljust(widths[0]), *tail]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def crossover(
    summary: dict[int, dict[str, Cell]], label_on: str, label_off: str, key: str = HEADLINE
) -> int | None:
    """The lowest concurrency at which ``label_off`` beats ``label_on`` beyond the spread."""
    better = next(b for k, _, b in METRICS if k == key)
    for conc in sorted(summary):
        cells = summary[conc]
        on, off = cells.get(label_on), cells.get(label_off)
        if on and off and beats(off.figures[key], on.figures[key], better):
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
        b = cells[self.best].figures[HEADLINE]
        text = f"CONC {self.conc}: {self.best} {b.cell()} tok/s"
        if self.runner_up is None:
            return text
        r = cells[self.runner_up].figures[HEADLINE]
        sure = "beyond the spread" if self.separated else "within the spread"
        return f"{text} vs {self.runner_up} {r.cell()} ({self.margin_pct:+.1f}%, {sure})"


def pick(summary: dict[int, dict[str, Cell]], conc: int, key: str = HEADLINE) -> Pick:
    """The setting with the best median of ``key`` at ``conc``, against the next best."""
    better = next(b for k, _, b in METRICS if k == key)
    cells = summary[conc]
    ranked = sorted(
        cells.values(),
        key=lambda c: c.figures[key].median,
        reverse=better == "higher",
    )
    best = ranked[0]
    if len(ranked) == 1:
        return Pick(conc, best.label, None, 0.0, False)
    second = ranked[1]
    bm, sm = best.figures[key].median, second.figures[key].median
    margin = (bm - sm) / sm * 100 if sm else 0.0
    if better == "lower":
        margin = -margin
    separated = beats(best.figures[key], second.figures[key], better)
    return Pick(conc, best.label, second.label, margin, separated)


def format_many(cells: dict[str, Cell], labels: Sequence[str]) -> str:
    """The table of one concurrency for any number of sides: medians (min..max) per figure."""
    present = [label for label in labels if label in cells]
    rows = [["Metric", *present]]
    for key, title, _ in METRICS:
        rows.append([title] + [cells[label].figures[key].cell() for label in present])
    rows.append(["Accept length"] + [_acc(cells[label].accept_length) for label in present])
    rows.append(["Runs (with failures)"] + [_runs(cells[label]) for label in present])
    return _grid(rows)
