"""The speed claim: the upstream benchmark's shape against the pull request's table, and with a
second endpoint the MTP pay-off, decided as ``make bench-compare`` decides it.

Every run is the bench's own (``qwen_npu.loadtest.cli.run_one``: locust, sglang.benchmark.serving's
random-ids dataset and definitions, the engine's accept length from its counters), at the shape of
SGLang PR #34353's table: random ids, 1024 in, 100 out, 100 prompts, CONC 1, 5 and 10 (flags shrink
it for tests and for ``helm test``). Each concurrency's figures are held against the table
(``qwen_npu.sim.timing.UPSTREAM_PR_34353``, the Qwen3.6-35B-A3B W8A8 TP2 910B MTP deployment) with
the bench's baseline thresholds (``qwen_npu.loadtest.baseline``), or against ``--baseline FILE``,
an earlier bench's JSONL for another checkpoint; a run of another shape is not compared.

With ``--compare URL`` (the same model with MTP off) both sides run interleaved and repeated
(``compare.run_interleaved``) and the verdict is bench-compare's: the compare side must not beat
the target in output tokens/s beyond the spread of the repeats at any measured concurrency
(``compare_stats.crossover``) by more than the bench's throughput threshold (5%, baseline.py),
so that two equal deployments do not fail on a hair. The tables go into the report.

The bench loads locust, whose gevent monkey-patching must precede every socket: ``prepare()``
imports it, and the verb calls it before any claim talks to an endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qwen_npu.loadtest.baseline import DEFAULT_THRESHOLDS, find_baseline
from qwen_npu.loadtest.baseline import compare as against_baseline
from qwen_npu.loadtest.compare_stats import (
    HEADLINE,
    METRICS,
    Cell,
    crossover,
    format_pair,
    summarize,
)
from qwen_npu.qualify.verdict import Check, Claim
from qwen_npu.sim.timing import UPSTREAM_PR_34353

if TYPE_CHECKING:  # the bench's dataset imports numpy: loaded when the claim runs (prepare())
    from qwen_npu.loadtest.dataset import DatasetConfig


def upstream_shape() -> DatasetConfig:
    """The bench dataset's defaults: the upstream command's (100 prompts, 1024 in, 100 out)."""
    # lazy: the bench's dataset imports numpy (qwen-npu[bench]), absent from the sidecar image
    from qwen_npu.loadtest.dataset import DatasetConfig

    return DatasetConfig()


TARGET, COMPARE = "target", "compare"


def prepare() -> str | None:
    """Load the bench (locust first); the reason it cannot run here, or None."""
    try:
        # lazy: locust's gevent patching must come before any socket; absent from the sidecar image
        from qwen_npu.loadtest import runner  # noqa: F401  (gevent's patching before any socket)
    except ImportError as exc:
        return (
            f"the bench's libraries are not installed here ({exc.name or exc}): run qwen-npu "
            "qualify where qwen-npu[bench] is installed (make qualify uses the checkout's .venv)"
        )
    return None


def pr_table_record(conc: int) -> dict[str, Any]:
    """The pull request's row at ``conc`` as a bench record (the keys the baseline compares)."""
    tpot, tok_s, ttft = UPSTREAM_PR_34353[conc]
    shape = upstream_shape()
    return {
        "max_concurrency": conc,
        "random_input_len": shape.input_len,
        "random_output_len": shape.output_len,
        "mean_tpot_ms": tpot,
        "output_throughput": tok_s,
        "mean_ttft_ms": ttft,
    }


def _baseline_for(record: dict[str, Any], baseline: list[dict[str, Any]] | None) -> Any:
    if baseline is not None:
        return find_baseline(baseline, record)
    conc = int(record["max_concurrency"])
    shape, upstream = (
        (record.get("random_input_len"), record.get("random_output_len")),
        upstream_shape(),
    )
    if conc in UPSTREAM_PR_34353 and shape == (upstream.input_len, upstream.output_len):
        return pr_table_record(conc)
    return None


def _worse(pct: float) -> str:
    return f"{pct:.1f}% worse" if pct > 0 else f"{-pct:.1f}% better"


def _table_check(
    records: Sequence[dict[str, Any]], baseline: list[dict[str, Any]] | None, source: str
) -> Check:
    lines, bad, compared = [], [], 0
    for rec in records:
        base = _baseline_for(rec, baseline)
        if base is None:
            continue
        compared += 1
        findings = against_baseline(base, rec)
        bad += [f"CONC {rec['max_concurrency']} {f.key}" for f in findings if f.regressed]
        lines += [
            f"CONC {rec['max_concurrency']} {f.key} {f.current:.1f} vs {f.baseline:.1f} "
            f"({_worse(f.worse_pct)}, limit {f.threshold_pct:.0f}% worse)"
            for f in findings
        ]
    if not compared:
        return Check.skip(
            f"against {source}",
            f"no run matches {source}'s shape (concurrency, {upstream_shape().input_len} in / "
            f"{upstream_shape().output_len} out): run the full shape on the target",
            npu_only=True,
        )
    detail = "; ".join(lines)
    if bad:
        return Check.of(f"against {source}", False, f"regressed: {', '.join(bad)}; {detail}")
    return Check.of(f"against {source}", True, detail, npu_only=True)


def payoff_check(summary: dict[int, dict[str, Cell]], repeats: int) -> Check:
    """bench-compare's decision: the compare side must not beat the target in output tokens/s
    beyond the spread of the repeats (``crossover``), by more than the bench's own throughput
    threshold (so two equal deployments cannot fail on a hair); skipped when the target runs no
    speculative decoding (no accept length: nothing to pay off)."""
    name = "MTP pays off"
    pairs = {
        c: cells for c, cells in sorted(summary.items()) if TARGET in cells and COMPARE in cells
    }
    accepts = ", ".join(
        f"CONC {c}: {_acc(cells[TARGET].accept_length)} vs {_acc(cells[COMPARE].accept_length)}"
        for c, cells in pairs.items()
    )
    if not any(cells[TARGET].accept_length for cells in pairs.values()):
        return Check.skip(name, f"the target reports no accept length (no MTP): {accepts}")
    margin = DEFAULT_THRESHOLDS[HEADLINE][1]
    losing = []
    for conc, cells in pairs.items():
        mine, theirs = cells[TARGET].figures[HEADLINE], cells[COMPARE].figures[HEADLINE]
        gain = (theirs.median - mine.median) / mine.median * 100 if mine.median else 0.0
        if crossover({conc: cells}, TARGET, COMPARE) is not None and gain > margin:
            losing.append(f"CONC {conc} ({gain:+.1f}%)")
    if losing:
        return Check.of(
            name,
            False,
            f"the compare side beats the target in output tok/s beyond the spread ({repeats} "
            f"repeats) and by more than {margin:.0f}% at {', '.join(losing)}: MTP does not pay "
            f"there; accept length {accepts}",
        )
    return Check.of(
        name,
        True,
        f"the compare side does not beat the target in output tok/s beyond the spread and "
        f"{margin:.0f}% at any measured CONC ({repeats} repeats); accept length {accepts}",
    )


def _acc(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _requests_check(records: Sequence[dict[str, Any]]) -> Check:
    failed = [r for r in records if r.get("verdict") != "pass"]
    total = sum(int(r.get("completed", 0)) for r in records)
    if failed:
        r = failed[0]
        return Check.of(
            "requests succeeded",
            False,
            f"{len(failed)} runs had failed requests, first CONC {r['max_concurrency']} "
            f"({r.get('failed', '?')} failed: {r.get('errors') or r.get('verdict')})",
        )
    return Check.of("requests succeeded", True, f"{len(records)} runs, {total} requests completed")


def run(
    target: str,
    concs: Sequence[int],
    data: DatasetConfig,
    compare_to: str | None = None,
    repeats: int = 3,
    baseline_file: Path | None = None,
    ready_timeout_s: float = 60.0,
) -> Claim:
    """Run the bench at each concurrency (both sides interleaved with ``compare_to``)."""
    # lazy: the bench (locust, numpy): loaded by prepare() before this runs
    from qwen_npu.loadtest import cli, compare
    from qwen_npu.loadtest.config import BenchConfig
    from qwen_npu.loadtest.progress import TargetNotReady
    from qwen_npu.loadtest.report import format_table, read_jsonl

    base = BenchConfig(target=target, data=data, ready_timeout_s=ready_timeout_s)
    baseline = read_jsonl(str(baseline_file)) if baseline_file else None
    source = f"baseline {baseline_file}" if baseline_file else "SGLang PR #34353's table"
    sides = [compare.Side(TARGET, target)]
    if compare_to is not None:
        sides.append(compare.Side(COMPARE, compare_to))
    try:
        records = compare.run_interleaved(
            sides, concs, repeats if compare_to else 1, base, cli.run_one, None, "qualify"
        )
    except TargetNotReady as exc:
        check = Check.of("requests succeeded", False, str(exc))
        return Claim("speed", str(exc), [check])
    except KeyboardInterrupt:
        check = Check.of("requests succeeded", False, "interrupted")
        return Claim("speed", "interrupted", [check])
    mine = [r for r in records if r.get("compare_label") == TARGET]
    data_out: dict[str, Any] = {"shape": vars(data), "concs": list(concs), "records": records}
    checks = [_requests_check(records)]
    if compare_to is None:
        checks.append(_table_check(mine, baseline, source))
        data_out["table"] = format_table(mine)
    else:
        summary = summarize(records, [TARGET, COMPARE])
        medians = [
            {
                "max_concurrency": conc,
                "random_input_len": data.input_len,
                "random_output_len": data.output_len,
                **{key: cells[TARGET].figures[key].median for key, _, _ in METRICS},
            }
            for conc, cells in sorted(summary.items())
            if TARGET in cells
        ]
        checks.append(_table_check(medians, baseline, source))
        tables = {
            conc: format_pair(cells, TARGET, COMPARE)
            for conc, cells in sorted(summary.items())
            if TARGET in cells and COMPARE in cells
        }
        data_out["tables"] = {str(k): v for k, v in tables.items()}
        checks.append(payoff_check(summary, repeats))
    summary_line = next(
        (c.evidence for c in checks if c.verdict == "fail"),
        f"CONC {' '.join(map(str, concs))}, {data.num_prompts} prompts, "
        f"{data.input_len} in / {data.output_len} out",
    )
    return Claim("speed", summary_line, checks, data_out)


def upstream_data(num_prompts: int, input_len: int, output_len: int) -> DatasetConfig:
    """The bench's dataset at the given shape (the rest: the upstream command's)."""
    return replace(
        upstream_shape(), num_prompts=num_prompts, input_len=input_len, output_len=output_len
    )
