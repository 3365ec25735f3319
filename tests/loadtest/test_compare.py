"""bench-compare and mtp-tune: the rules on hand-made records, bad input, and the crossover.

The crossover test runs the calibrated MTP profile (3 steps) against its MTP-off twin on two
simulators (timings scaled down, few prompts) and checks that bench-compare finds, beyond the
spread of its repeats, the concurrency at which MTP stops paying that the simulator's timing
model gives on paper (``qwen_npu.sim.timing.crossover``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qwen_npu.loadtest.compare_stats import Spread, crossover, format_pair, pick, summarize, verdict
from qwen_npu.loadtest.tune import Setting, bands, parse_settings, parse_urls, recommend
from qwen_npu.sim.testing import running_sim

from .benchrun import REPO

CLOSED = "http://127.0.0.1:9"


def _rec(
    label: str, conc: int, tput: float, tpot: float = 10.0, acc: float | None = None
) -> dict[str, Any]:
    return {
        "compare_label": label,
        "max_concurrency": conc,
        "output_throughput": tput,
        "mean_tpot_ms": tpot,
        "mean_ttft_ms": 50.0,
        "mean_e2e_latency_ms": 1000.0,
        "accept_length": acc,
        "verdict": "pass",
    }


def _records() -> list[dict[str, Any]]:
    # on wins clearly at 1, overlaps at 8, off wins clearly at 32
    return [
        _rec("on", 1, 55.0, acc=2.5), _rec("on", 1, 56.0, acc=2.5),
        _rec("off", 1, 39.0), _rec("off", 1, 40.0),
        _rec("on", 8, 160.0), _rec("on", 8, 170.0),
        _rec("off", 8, 165.0), _rec("off", 8, 168.0),
        _rec("on", 32, 265.0), _rec("on", 32, 268.0),
        _rec("off", 32, 320.0), _rec("off", 32, 325.0),
    ]  # fmt: skip


def test_a_verdict_needs_separate_ranges() -> None:
    a, b = Spread.of([10.0, 11.0]), Spread.of([12.0, 13.0])
    assert verdict(a, b, "higher", "A", "B") == "B better"
    assert verdict(a, b, "lower", "A", "B") == "A better"
    assert verdict(a, Spread.of([10.5, 12.0]), "higher", "A", "B") == "within spread"
    assert verdict(Spread.of([1.0]), Spread.of([2.0]), "higher", "A", "B").startswith("no spread")


def test_crossover_is_the_first_concurrency_where_off_wins_beyond_the_spread() -> None:
    summary = summarize(_records(), ["on", "off"])
    assert crossover(summary, "on", "off") == 32
    assert crossover(summary, "off", "on") == 1
    table = format_pair(summary[1], "on", "off")
    assert "on better" in table and "2.50" in table and "55.5 (55.0..56.0)" in table
    assert "within spread" in format_pair(summary[8], "on", "off")


def test_tune_bands_and_overlays(tmp_path: Path) -> None:
    relabel = {"on": "3 steps", "off": "off"}
    recs = [dict(r, compare_label=relabel[r["compare_label"]]) for r in _records()]
    summary = summarize(recs, ["3 steps", "off"])
    settings = [Setting.parse("3"), Setting.parse("off")]
    got = [(ps[0].conc, ps[-1].conc, s.name) for s, ps in bands(summary, settings)]
    assert got == [(1, 1, "3"), (8, 32, "off")]
    assert not pick(summary, 8).separated
    p = pick(summary, 32)
    assert p.best == "off" and p.separated and p.margin_pct > 15
    text = recommend(summary, settings, tmp_path / "t")
    assert "numSteps: 3" in text and "numDraftTokens: 4" in text and "enabled: false" in text
    files = sorted(f.name for f in tmp_path.glob("t-values-*.yaml"))
    assert files and all(f.endswith(".yaml") for f in files)
    assert Setting.parse("2").overlay() == {
        "mtp": {"enabled": True, "numSteps": 2, "numDraftTokens": 3}
    }


@pytest.mark.parametrize(
    ("text", "word"),
    [("off", "two or more"), ("off 1 1", "twice"), ("off x", "not a setting")],
)
def test_bad_settings(text: str, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        parse_settings(text)


def test_urls_must_cover_every_setting() -> None:
    settings = parse_settings("off 3")
    assert parse_urls("off=http://a:1 3=http://b:2/", settings) == {
        "off": "http://a:1",
        "3": "http://b:2",
    }
    with pytest.raises(ValueError, match="no endpoint for setting"):
        parse_urls("off=http://a:1", settings)


def _verb(verb: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "qwen_npu", verb, *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, cwd=REPO, stdin=subprocess.DEVNULL
    )


def _compare(*args: str) -> subprocess.CompletedProcess[str]:
    return _verb("bench-compare", *args)


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.slow
def test_an_unreachable_side_is_one_line_and_nothing_runs(tmp_path: Path) -> None:
    with running_sim(profile="fast-test") as up:
        out = tmp_path / "c.jsonl"
        proc = _compare("--a", up, "--b", CLOSED, "--output", str(out), "--concs", "1")
    assert proc.returncode == 1  # as qwen-npu bench: a target that does not answer
    line = _one_line(proc.stderr)
    assert line.startswith(
        "qwen-npu bench-compare: error: side B http://127.0.0.1:9: GET /v1/models gave"
    )
    assert not out.exists()


@pytest.mark.slow
def test_different_models_are_one_line_and_nothing_runs(tmp_path: Path) -> None:
    with (
        running_sim(profile="fast-test", served_model_name="model-a") as a,
        running_sim(profile="fast-test", served_model_name="model-b") as b,
    ):
        out = tmp_path / "c.jsonl"
        proc = _compare("--a", a, "--b", b, "--output", str(out), "--concs", "1")
        tok = _compare("--a", a, "--b", a, "--label-b", "A", "--output", str(out))
    assert proc.returncode == 2
    assert "serve a different model (/v1/models): ('model-a',) vs ('model-b',)" in _one_line(
        proc.stderr
    )
    assert not out.exists()
    assert tok.returncode == 2 and "both 'A'" in _one_line(tok.stderr)


@pytest.mark.slow
def test_different_tokenizers_are_one_line(tmp_path: Path) -> None:
    with (
        running_sim(profile="fast-test", model_path="org/x", served_model_name="same") as a,
        running_sim(profile="fast-test", model_path="org/y", served_model_name="same") as b,
    ):
        proc = _compare("--a", a, "--b", b, "--output", str(tmp_path / "c.jsonl"))
    assert proc.returncode == 2
    assert "serve a different model_path (/model_info): 'org/x' vs 'org/y'" in _one_line(
        proc.stderr
    )


@pytest.mark.slow
def test_bad_tune_input_is_one_line() -> None:
    proc = _verb("mtp-tune", "--settings", "off")
    assert proc.returncode == 2
    assert "two or more" in _one_line(proc.stderr)
    proc = _verb("mtp-tune", "--settings", "off 3", "--profile", "no-such-profile")
    assert proc.returncode == 2 and "no-such-profile" in _one_line(proc.stderr)


# -- the crossover on the simulator ----------------------------------------------------------

PROFILE = "qwen3.6-35b-a3b-910b-tp2-mtp"
SCALE = 0.25
IN_LEN, OUT_LEN = 256, 50
CONCS = (1, 32)


def _paper_config(flags: dict[str, Any]) -> Any:
    from qwen_npu.sim import config as simconfig

    kebab = {k.replace("_", "-"): v for k, v in flags.items() if k != "profile"}
    cfg, _ = simconfig.build(kebab, profile=flags["profile"], env={})
    return cfg


@pytest.fixture(scope="module")
def mtp_pair() -> Iterator[tuple[dict[str, Any], dict[str, Any], str, str]]:
    from qwen_npu.loadtest.tune import sim_flags

    on = sim_flags(PROFILE, Setting.parse("3"), SCALE)
    off = sim_flags(PROFILE, Setting.parse("off"), SCALE)
    with running_sim(**on) as url_on, running_sim(**off) as url_off:
        yield on, off, url_on, url_off


@pytest.mark.slow
def test_bench_compare_finds_the_crossover_the_model_implies(
    mtp_pair: tuple[dict[str, Any], dict[str, Any], str, str], tmp_path: Path
) -> None:
    timing = pytest.importorskip("qwen_npu.sim.timing")
    on, off, url_on, url_off = mtp_pair
    cfg_on, cfg_off = _paper_config(on), _paper_config(off)
    lens = {"input_len": IN_LEN, "output_len": OUT_LEN}
    # The chosen concurrencies sit well away from the crossover, so that the measurement can
    # separate the two sides beyond the spread of two repeats on a loaded machine.
    for conc in CONCS:
        a = timing.steady_state(cfg_on, conc, **lens).output_tok_per_s
        b = timing.steady_state(cfg_off, conc, **lens).output_tok_per_s
        assert abs(a - b) / min(a, b) > 0.1, (conc, a, b)
    paper = timing.crossover(cfg_on, cfg_off, CONCS, **lens)
    assert paper == 32

    out = tmp_path / "cmp.jsonl"
    proc = _compare(
        "--a", url_on, "--b", url_off, "--label-a", "mtp-on", "--label-b", "mtp-off",
        "--concs", " ".join(map(str, CONCS)), "--repeats", "2", "--output", str(out),
        "--num-prompts", "32", "--input-len", str(IN_LEN), "--output-len", str(OUT_LEN),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    # Interleaved: per concurrency and repeat, A then B.
    assert [(r["max_concurrency"], r["compare_label"]) for r in records] == [
        (c, side) for c in CONCS for _ in range(2) for side in ("mtp-on", "mtp-off")
    ]
    summary = summarize(records, ["mtp-on", "mtp-off"])
    assert crossover(summary, "mtp-on", "mtp-off") == paper
    assert f"mtp-off beats mtp-on in output tok/s beyond the spread from CONC {paper}" in (
        proc.stdout
    )
    on_cell = summary[1]["mtp-on"]
    assert on_cell.accept_length is not None and 1.5 < on_cell.accept_length < 4.0
    assert summary[1]["mtp-off"].accept_length is None
    png, page = out.with_suffix(".png"), out.with_suffix(".html")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = page.read_text()
    assert "<img" in html and "Output tok/s" in html and "mtp-on better" in html
