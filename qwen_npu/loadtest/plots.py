"""The pictures and one-page reports beside the JSONL (``<stem>.png``, ``<stem>.html``): the sweep's
and the comparison's, so a capacity review can look rather than read. Matplotlib's Agg backend (no
display); the HTML embeds the PNG and carries the table the terminal shows.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qwen_npu.loadtest.compare_stats import METRICS, Cell
from qwen_npu.loadtest.report import format_table


def _figure(panels: int, width: float) -> tuple[Any, Any]:
    # lazy: an extra's (pyproject.toml); the base install goes without
    import matplotlib

    matplotlib.use("Agg")
    # lazy: an extra's (pyproject.toml); the base install goes without
    import matplotlib.pyplot as plt

    return plt.subplots(1, panels, figsize=(width, 4), constrained_layout=True)


def _axis(ax: Any, title: str, unit: str, concs: list[int]) -> None:
    ax.set_title(title)
    ax.set_xlabel("concurrency")
    ax.set_xticks(concs)
    ax.set_ylabel(unit)
    ax.grid(True, alpha=0.3)
    ax.legend()


def _save(fig: Any, title: str, path: str | Path) -> Path:
    # lazy: an extra's (pyproject.toml); the base install goes without
    import matplotlib.pyplot as plt

    fig.suptitle(title)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _page(title: str, intro: str, text: str, png: str | Path, path: str | Path) -> Path:
    img = base64.b64encode(Path(png).read_bytes()).decode()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"</head><body style='font-family:sans-serif'><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(intro)}</p><pre>{html.escape(text)}</pre>"
        f"<img alt='figures against concurrency' src='data:image/png;base64,{img}'></body></html>"
    )
    return out


def _by_conc(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: int(r.get("max_concurrency") or 0))


def write_png(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Three panels against CONC: TTFT and TPOT (p50 and p99), output throughput."""
    recs = _by_conc(records)
    conc = [int(r.get("max_concurrency") or 0) for r in recs]
    fig, axes = _figure(3, 14)
    for ax, series, unit in ((axes[0], "ttft", "ms"), (axes[1], "tpot", "ms/token")):
        ax.plot(conc, [r.get(f"median_{series}_ms", 0) for r in recs], "o-", label="p50")
        ax.plot(conc, [r.get(f"p99_{series}_ms", 0) for r in recs], "s--", label="p99")
        _axis(ax, series.upper(), unit, conc)
    tput = [r.get("output_throughput", 0) for r in recs]
    axes[2].plot(conc, tput, "o-", color="tab:green", label="output")
    _axis(axes[2], "Output throughput", "tokens/s", conc)
    return _save(fig, f"qwen-npu bench sweep {recs[0].get('target', '')}", path)


def write_html(records: Sequence[dict[str, Any]], png: str | Path, path: str | Path) -> Path:
    recs = _by_conc(records)
    r = recs[0]
    meta = (
        f"target {r.get('target')} · API {r.get('api')} · {r.get('num_prompts')} prompts · "
        f"{r.get('random_input_len')} in / {r.get('random_output_len')} out · seed {r.get('seed')}"
    )
    return _page("qwen-npu bench sweep", meta, format_table(recs), png, path)


def write_compare_png(
    summary: dict[int, dict[str, Cell]], labels: Sequence[str], path: str | Path
) -> Path:
    """One panel per compared figure against CONC: each side's median, its range as error bars."""
    concs = sorted(summary)
    fig, axes = _figure(len(METRICS), 4.5 * len(METRICS))
    for ax, (key, title, better) in zip(axes, METRICS, strict=True):
        for label in labels:
            xs = [c for c in concs if label in summary[c]]
            spreads = [summary[c][label].figures[key] for c in xs]
            med = [s.median for s in spreads]
            err = [[s.median - s.lo for s in spreads], [s.hi - s.median for s in spreads]]
            ax.errorbar(xs, med, yerr=err, marker="o", capsize=4, label=label)
        ax.set_xscale("log")
        ax.minorticks_off()
        _axis(ax, f"{title} ({better} is better)", "", concs)
        ax.set_xticklabels([str(c) for c in concs])
    return _save(fig, "qwen-npu bench-compare: median and range over repeats", path)


def write_compare_html(
    summary: dict[int, dict[str, Cell]],
    labels: Sequence[str],
    text: str,
    png: str | Path,
    path: str | Path,
) -> Path:
    intro = (
        f"concurrencies {', '.join(map(str, sorted(summary)))}; figures are medians with their "
        "range over the repeats (min..max); a verdict only where the ranges do not overlap."
    )
    return _page("qwen-npu bench-compare: " + " vs ".join(labels), intro, text, png, path)
