"""``make mtp-tune``: which MTP setting (off, 1, 2, 3 steps ...) for which concurrency band.

Speculative decoding is not free: every verify step runs the draft tokens of every running request,
so MTP wins while the batch is small and loses once it is compute bound; where it turns depends on
the acceptance. This runs the comparison of bench-compare over every setting at once (interleaved,
repeated, the same dataset and seed), picks the best output throughput per concurrency, groups
neighbouring concurrencies with the same winner into bands, and prints each band's evidence and
the Helm values overlay that applies it (``mtp.enabled``, ``mtp.numSteps``, ``mtp.numDraftTokens``).

Two ways to get the endpoints:
- locally (default): one simulator per setting, each started from the calibrated profile with the
  setting applied (``--time-scale`` shrinks every ``*-ms`` timing to save wall time; the verdicts
  depend on ratios, not on the scale);
- on a target: ``--urls "off=http://a:30000 3=http://b:30000"``, one deployment per setting.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from qwen_npu.cli_parser import (
    EXIT_FAILED,
    OneLineParser,
    fail,
    float_between,
    output_file,
    positive_int,
)
from qwen_npu.loadtest.compare import (
    CompareError,
    Side,
    bench_config,
    check_same_model,
    identity,
    parse_concs,
    run_interleaved,
    run_sides,
)
from qwen_npu.loadtest.compare_stats import Cell, Pick, format_many, pick, summarize
from qwen_npu.loadtest.progress import TargetNotReady
from qwen_npu.ports import LOCAL_ENGINE_URL

PROG = "qwen-npu mtp-tune"
DEFAULT_PROFILE = "qwen3.6-35b-a3b-910b-tp2-mtp"
DEFAULT_OUTPUT = "out/bench/mtp-tune.jsonl"


@dataclass(frozen=True)
class Setting:
    """One MTP setting: ``off`` or a number of draft steps (top-k 1: draft tokens = steps + 1)."""

    name: str
    steps: int | None

    @classmethod
    def parse(cls, text: str) -> Setting:
        word = text.strip().lower()
        if word in ("off", "0", "none"):
            return cls("off", None)
        if word.isdigit() and 1 <= int(word) <= 16:
            return cls(word, int(word))
        raise CompareError(f"--settings: {text!r} is not a setting; use off or a step count 1..16")

    @property
    def label(self) -> str:
        if self.steps is None:
            return "off"
        return f"{self.steps} step" + ("s" if self.steps > 1 else "")

    def overlay(self) -> dict[str, Any]:
        """The chart's values (helm/qwen-npu/values.yaml ``mtp.*``) that apply this setting."""
        if self.steps is None:
            return {"mtp": {"enabled": False}}
        return {"mtp": {"enabled": True, "numSteps": self.steps, "numDraftTokens": self.steps + 1}}

    def overlay_yaml(self) -> str:
        mtp = self.overlay()["mtp"]
        lines = ["mtp:"] + [f"  {k}: {str(v).lower()}" for k, v in mtp.items()]
        return "\n".join(lines) + "\n"


def parse_settings(text: str) -> list[Setting]:
    settings = [Setting.parse(w) for w in text.replace(",", " ").split()]
    if len(settings) < 2:
        raise CompareError(f'--settings "{text}": give two or more, e.g. --settings "off 1 2 3"')
    if len({s.name for s in settings}) != len(settings):
        raise CompareError(f'--settings "{text}": a setting is listed twice')
    return settings


def parse_urls(text: str, settings: Sequence[Setting]) -> dict[str, str]:
    """``off=http://a 3=http://b``: one URL per setting, every setting covered."""
    urls: dict[str, str] = {}
    for item in text.split():
        name, sep, url = item.partition("=")
        if not sep or not url.startswith(("http://", "https://")):
            raise CompareError(f"--urls: {item!r}; use <setting>=http://<host>:<port>")
        urls[Setting.parse(name).name] = url.rstrip("/")
    missing = [s.name for s in settings if s.name not in urls]
    if missing:
        raise CompareError(f"--urls gives no endpoint for setting(s) {', '.join(missing)}")
    return urls


# -- local simulators ------------------------------------------------------------------------


def sim_flags(profile: str, setting: Setting, time_scale: float) -> dict[str, Any]:
    """running_sim keywords: the profile, the setting, and every ``*-ms`` timing scaled."""
    # lazy: local mode only: the simulator is the sim extra's
    from qwen_npu.sim import config as simconfig

    base, _ = simconfig.build(profile=profile, env={})
    flags: dict[str, Any] = {"profile": profile, "startup_delay_s": 0.0}
    if time_scale != 1.0:
        for key, value in _fields(base).items():
            if "_ms" in key and isinstance(value, float | int) and not isinstance(value, bool):
                flags[key] = float(value) * time_scale
    if setting.steps is None:
        flags["speculative_algorithm"] = "none"
        return flags
    if not base.spec_enabled:
        flags["speculative_algorithm"] = "NEXTN"
    flags["speculative_num_steps"] = setting.steps
    flags["speculative_num_draft_tokens"] = setting.steps + 1
    flags.update(acceptance_flags(base, setting.steps))
    return flags


def _fields(cfg: Any) -> dict[str, Any]:
    """The config's fields by snake-case name (a pydantic model or a dataclass)."""
    if hasattr(cfg, "model_dump"):
        return dict(cfg.model_dump())

    return dataclasses.asdict(cfg)


def acceptance_flags(base: Any, steps: int) -> dict[str, Any]:
    """The acceptance of ``steps`` draft steps from the same per-position model as the profile's.

    A profile that states acceptance per draft position already covers any step count. One that
    gives a mean accept length for its own step count is read as each draft accepted with one
    probability p until the first rejection (the simulator's model); that p then gives the mean
    for ``steps``.
    """
    if getattr(base, "accept_length", None) is None or base.accept_distribution is not None:
        return {}
    # lazy: local mode only: the simulator is the sim extra's
    from qwen_npu.sim.timing import solve_constant_rate

    p = solve_constant_rate(base.speculative_num_steps, float(base.accept_length))
    return {"accept_length": sum(p**i for i in range(steps + 1))}


@contextlib.contextmanager
def local_sides(
    profile: str, settings: Sequence[Setting], time_scale: float
) -> Iterator[list[Side]]:
    """One simulator per setting, all running at once (the runs interleave), stopped at exit."""
    # lazy: local mode only: the simulator is the sim extra's
    from qwen_npu.sim.testing import running_sim

    with contextlib.ExitStack() as stack:
        sides = []
        for s in settings:
            url = stack.enter_context(running_sim(**sim_flags(profile, s, time_scale)))
            sides.append(Side(s.label, url))
        yield sides


# -- the recommendation ------------------------------------------------------------------------


@dataclass(frozen=True)
class Band:
    """Neighbouring concurrencies with the same best setting."""

    lo: int
    hi: int
    setting: Setting
    picks: tuple[Pick, ...]

    @property
    def name(self) -> str:
        return f"CONC {self.lo}" if self.lo == self.hi else f"CONC {self.lo}-{self.hi}"


def bands(summary: dict[int, dict[str, Cell]], settings: Sequence[Setting]) -> list[Band]:
    by_label = {s.label: s for s in settings}
    out: list[Band] = []
    for conc in sorted(summary):
        p = pick(summary, conc)
        if out and out[-1].setting.label == p.best:
            last = out[-1]
            out[-1] = replace(last, hi=conc, picks=(*last.picks, p))
        else:
            out.append(Band(conc, conc, by_label[p.best], (p,)))
    return out


def recommend(
    summary: dict[int, dict[str, Cell]], settings: Sequence[Setting], stem: Path | None
) -> str:
    """Per band: the setting, the evidence per concurrency, the values overlay (also to a file)."""
    lines = ["Recommendation (best median output tok/s per concurrency):"]
    for band in bands(summary, settings):
        lines.append(f"\n{band.name}: {band.setting.label}")
        lines += [f"  {p.evidence(summary)}" for p in band.picks]
        unsure = [p.conc for p in band.picks if not p.separated]
        if unsure:
            lines.append(
                f"  not beyond the spread at CONC {', '.join(map(str, unsure))}: the runner-up "
                "is as good there; more REPEATS or NUM_PROMPTS would separate them"
            )
        overlay = band.setting.overlay_yaml()
        if stem is not None:
            path = Path(f"{stem}-values-conc{band.lo}-{band.hi}.yaml")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# mtp-tune: {band.name} -> {band.setting.label}\n{overlay}")
            lines.append(f"  values overlay ({path}; helm upgrade ... -f {path}):")
        else:
            lines.append("  values overlay:")
        lines += [f"    {line}" for line in overlay.splitlines()]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="Compare MTP settings per concurrency and recommend one per band. Any "
        "further flag is a qwen-npu bench flag (dataset, API, ramp).",
    )
    p.add_argument("--settings", default="off 1 2 3", help='e.g. "off 1 2 3"')
    p.add_argument("--urls", default="", help='one endpoint per setting: "off=http://a 3=..."')
    p.add_argument("--profile", default=DEFAULT_PROFILE, help="simulator profile (local mode)")
    p.add_argument(
        "--time-scale",
        type=float_between(0, 10, low_open=True),
        default=1.0,
        help="local: scale *-ms timings",
    )
    p.add_argument("--concs", default="1 5 10 32")
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument(
        "--waves",
        type=positive_int,
        default=3,
        help="prompts per run = waves x concurrency (unless --num-prompts)",
    )
    p.add_argument(
        "--output", type=output_file, default=DEFAULT_OUTPUT, help="JSONL history (%(default)s)"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args, rest = build_parser().parse_known_args(argv)
    from qwen_npu.loadtest import cli  # light: locust comes with bench_config, once flags are good

    try:
        settings = parse_settings(args.settings)
        concs = parse_concs(args.concs)
        urls = parse_urls(args.urls, settings) if args.urls.strip() else None
        if urls is None:
            # lazy: local mode only: the simulator is the sim extra's
            from qwen_npu.sim.config import ConfigError

            # every side's simulator config, built now and before bench_config loads locust (a
            # bad one is one line, not a run, and gevent's patching never follows a refusal)
            try:
                for setting in settings:
                    sim_flags(args.profile, setting, args.time_scale)
            except ConfigError as exc:
                raise CompareError(str(exc)) from None
        base = bench_config(rest, LOCAL_ENGINE_URL, PROG)
        fixed_prompts = any(a.split("=")[0] == "--num-prompts" for a in rest)
    except (CompareError, ValueError, OSError) as exc:
        return fail(PROG, str(exc))

    def run_one(config: Any) -> tuple[dict[str, Any], bool]:
        if not fixed_prompts:
            data = replace(config.data, num_prompts=args.waves * config.concurrency)
            config = replace(config, data=data)
        return cli.run_one(config)

    output = Path(args.output) if args.output else None
    with contextlib.ExitStack() as stack:
        if urls is None:
            sides = stack.enter_context(local_sides(args.profile, settings, args.time_scale))
            where = f"local simulators of profile {args.profile} (time scale {args.time_scale})"
        else:
            sides = [Side(s.label, urls[s.name]) for s in settings]
            where = "the given endpoints"
            try:
                check_same_model(sides, [identity(s) for s in sides])
            except TargetNotReady as exc:  # as qwen-npu bench: a target that does not answer is 1
                return fail(PROG, str(exc), EXIT_FAILED)
            except CompareError as exc:
                return fail(PROG, str(exc))
        print(f"mtp-tune: settings {', '.join(s.label for s in sides)} on {where}", flush=True)

        tag = f"mtp-tune-{time.time():.0f}"
        records = run_sides(
            PROG,
            output,
            lambda: run_interleaved(sides, concs, args.repeats, base, run_one, output, tag),
        )
        if isinstance(records, int):
            return records
    labels = [s.label for s in sides]
    summary = summarize(records, labels)
    tables = [f"Concurrency {c}\n{format_many(cells, labels)}" for c, cells in summary.items()]
    stem = output.with_suffix("") if output is not None else None
    text = "\n\n".join(tables) + "\n\n" + recommend(summary, settings, stem)
    if output is not None:
        # lazy: matplotlib loads only when a picture is asked for
        from qwen_npu.loadtest.plots import write_compare_html, write_compare_png

        png = write_compare_png(summary, labels, f"{stem}.png")
        page = write_compare_html(summary, labels, text, png, f"{stem}.html")
        text += f"\n\nresults appended to {output}\npicture: {png}\nreport: {page}"
    print(text)
    return 0 if all(r.get("verdict") == "pass" for r in records) else 1


if __name__ == "__main__":  # the CLI's edge too: qwen-npu mtp-tune
    from qwen_npu.cli import main as cli_main

    raise SystemExit(cli_main(["mtp-tune", *sys.argv[1:]]))
