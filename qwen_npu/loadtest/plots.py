"""The pictures and HTML reports: the sweep's, and the comparison's (bench-compare, mtp-tune).

Written beside the JSONL (``<output stem>.png`` and ``.html``) so a capacity review can look rather
than read. Matplotlib's Agg backend: no display needed. The HTML is self-contained (the PNG is
embedded) and carries the same table the terminal shows.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qwen_npu.loadtest.compare_stats import METRICS, Cell
from qwen_npu.loadtest.report import format_table


def write_png(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Three panels (TTFT, TPOT: p50 and p99; output throughput) against CONC."""
    # lazy: an extra's (pyproject.toml); the base install goes without
    import matplotlib

    matplotlib.use("Agg")
    # lazy: an extra's (pyproject.toml); the base install goes without
    import matplotlib.pyplot as plt

    recs = sorted(records, key=lambda r: int(r.get("max_concurrency") or 0))
    conc = [int(r.get("max_concurrency") or 0) for r in recs]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), constrained_layout=True)
    for ax, series, unit in ((axes[0], "ttft", "ms"), (axes[1], "tpot", "ms/token")):
        ax.plot(conc, [r.get(f"median_{series}_ms", 0) for r in recs], "o-", label="p50")
        ax.plot(conc, [r.get(f"p99_{series}_ms", 0) for r in recs], "s--", label="p99")
        ax.set_title(series.upper())
        ax.set_xlabel("concurrency")
        ax.set_xticks(conc)
        ax.set_ylabel(unit)
        ax.grid(True, alpha=0.3)
        ax.legend()
    axes[2].plot(conc, [r.get("output_throughput", 0) for r in recs], "o-", color="tab:green")
    axes[2].set_title("Output throughput")
    axes[2].set_xlabel("concurrency")
    axes[2].set_xticks(conc)
    axes[2].set_ylabel("tokens/s")
    axes[2].grid(True, alpha=0.3)
    target = recs[0].get("target", "") if recs else ""
    fig.suptitle(f"qwen-npu bench sweep {target}")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def write_html(records: Sequence[dict[str, Any]], png: str | Path, path: str | Path) -> Path:
    """A one-page report: the table and the embedded PNG."""
    recs = sorted(records, key=lambda r: int(r.get("max_concurrency") or 0))
    img = base64.b64encode(Path(png).read_bytes()).decode()
    first = recs[0] if recs else {}
    title = "qwen-npu bench sweep"
    meta = (
        f"target {first.get('target')} · API {first.get('api')} · "
        f"{first.get('num_prompts')} prompts · {first.get('random_input_len')} in / "
        f"{first.get('random_output_len')} out · seed {first.get('seed')}"
    )
    body = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        "<body style='font-family:sans-serif'>"
        f"<h1>{title}</h1><p>{html.escape(meta)}</p>"
        f"<pre>{html.escape(format_table(recs))}</pre>"
        f"<img alt='TTFT, TPOT and output throughput against concurrency' "
        f"src='data:image/png;base64,{img}'></body></html>"
    )
    out = Path(path)
    out.write_text(body)
    return out


def write_compare_png(
    summary: dict[int, dict[str, Cell]], labels: Sequence[str], path: str | Path
) -> Path:
    """One panel per compared figure against CONC: each side's median, its range as error bars."""
    # lazy: an extra's (pyproject.toml); the base install goes without
    import matplotlib

    matplotlib.use("Agg")
    # lazy: an extra's (pyproject.toml); the base install goes without
    import matplotlib.pyplot as plt

    concs = sorted(summary)
    fig, axes = plt.subplots(
        1, len(METRICS), figsize=(4.5 * len(METRICS), 4), constrained_layout=True
    )
    for ax, (key, title, better) in zip(axes, METRICS, strict=True):
        for label in labels:
            xs = [c for c in concs if label in summary[c]]
            spreads = [summary[c][label].figures[key] for c in xs]
            med = [s.median for s in spreads]
            err = [[s.median - s.lo for s in spreads], [s.hi - s.median for s in spreads]]
            ax.errorbar(xs, med, yerr=err, marker="o", capsize=4, label=label)
        ax.set_title(f"{title} ({better} is better)")
        ax.set_xlabel("concurrency")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(concs)
        ax.set_xticklabels([str(c) for c in concs])
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("qwen-npu bench-compare: median and range over repeats")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def write_compare_html(
    summary: dict[int, dict[str, Cell]],
    labels: Sequence[str],
    text: str,
    png: str | Path,
    path: str | Path,
) -> Path:
    """A one-page report: the printed tables (one per concurrency) and the embedded PNG."""
    img = base64.b64encode(Path(png).read_bytes()).decode()
    title = "qwen-npu bench-compare: " + " vs ".join(labels)
    body = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "</head><body style='font-family:sans-serif'>"
        f"<h1>{html.escape(title)}</h1><p>concurrencies {', '.join(map(str, sorted(summary)))}"
        "; figures are medians with their range over the repeats (min..max); a verdict is "
        "given only where the ranges do not overlap.</p>"
        f"<pre>{html.escape(text)}</pre>"
        f"<img alt='compared figures against concurrency' src='data:image/png;base64,{img}'>"
        "</body></html>"
    )
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body)
    return out
