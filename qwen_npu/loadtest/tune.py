"""``qwen-npu mtp-tune``: which MTP setting (off, 1, 2, 3 steps ...) for which concurrency band.

Every verify step runs the draft tokens of every running request, so MTP wins while the batch is
small and loses once it is compute bound. This runs bench-compare over every setting at once, on
one local simulator per setting or on ``--urls``, and prints per band of concurrencies the winner,
its evidence and the Helm values overlay that applies it (docs/loadtest.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from qwen_npu.cli_parser import EXIT_FAILED, fail, float_between, positive_int
from qwen_npu.loadtest import cli
from qwen_npu.loadtest.compare import Side, bench_config, check_same_model, parser, run_and_report
from qwen_npu.loadtest.compare_stats import Cell, Pick, format_many, pick
from qwen_npu.loadtest.progress import TargetNotReady
from qwen_npu.ports import LOCAL_ENGINE_URL

PROG = "qwen-npu mtp-tune"
DEFAULT_PROFILE = "qwen3.6-35b-a3b-910b-tp2-mtp"


@dataclass(frozen=True)
class Setting:
    """``off`` or a number of draft steps (top-k 1: draft tokens = steps + 1)."""

    name: str
    steps: int | None

    @classmethod
    def parse(cls, text: str) -> Setting:
        word = text.strip().lower()
        if word in ("off", "0", "none"):
            return cls("off", None)
        if word.isdigit() and 1 <= int(word) <= 16:
            return cls(word, int(word))
        raise ValueError(f"--settings: {text!r} is not a setting; use off or a step count 1..16")

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


def parse_settings(text: str) -> list[Setting]:
    settings = [Setting.parse(w) for w in text.replace(",", " ").split()]
    if len(settings) < 2:
        raise ValueError(f'--settings "{text}": give two or more, e.g. --settings "off 1 2 3"')
    if len({s.name for s in settings}) != len(settings):
        raise ValueError(f'--settings "{text}": a setting is listed twice')
    return settings


def parse_urls(text: str, settings: Sequence[Setting]) -> dict[str, str]:
    """``off=http://a 3=http://b``: one URL per setting, every setting covered."""
    urls: dict[str, str] = {}
    for item in text.split():
        name, sep, url = item.partition("=")
        if not sep or not url.startswith(("http://", "https://")):
            raise ValueError(f"--urls: {item!r}; use <setting>=http://<host>:<port>")
        urls[Setting.parse(name).name] = url.rstrip("/")
    missing = [s.name for s in settings if s.name not in urls]
    if missing:
        raise ValueError(f"--urls gives no endpoint for setting(s) {', '.join(missing)}")
    return urls


def sim_flags(profile: str, setting: Setting, time_scale: float) -> dict[str, Any]:
    """running_sim keywords: the profile, the setting, and every ``*-ms`` timing scaled."""
    # lazy: local mode only: the simulator is the sim extra's
    from qwen_npu.sim import config as simconfig
    from qwen_npu.sim.timing import solve_constant_rate

    base, _ = simconfig.build(profile=profile, env={})
    flags: dict[str, Any] = {"profile": profile, "startup_delay_s": 0.0}
    if time_scale != 1.0:
        for key, value in base.model_dump().items():
            if "_ms" in key and isinstance(value, float | int) and not isinstance(value, bool):
                flags[key] = float(value) * time_scale
    if setting.steps is None:
        flags["speculative_algorithm"] = "none"
        return flags
    if not base.spec_enabled:
        flags["speculative_algorithm"] = "NEXTN"
    flags["speculative_num_steps"] = setting.steps
    flags["speculative_num_draft_tokens"] = setting.steps + 1
    if base.accept_length is not None and base.accept_distribution is None:
        # A mean accept length for the profile's own step count: each draft accepted with one
        # probability p until the first rejection (the simulator's model); p gives the mean for
        # ``steps``. A per-position distribution already covers any step count.
        p = solve_constant_rate(base.speculative_num_steps, float(base.accept_length))
        flags["accept_length"] = sum(p**i for i in range(setting.steps + 1))
    return flags


def bands(
    summary: dict[int, dict[str, Cell]], settings: Sequence[Setting]
) -> list[tuple[Setting, list[Pick]]]:
    """Neighbouring concurrencies with the same best setting, with the pick at each."""
    by_label = {s.label: s for s in settings}
    out: list[tuple[Setting, list[Pick]]] = []
    for conc in sorted(summary):
        p = pick(summary, conc)
        if out and out[-1][0].label == p.best:
            out[-1][1].append(p)
        else:
            out.append((by_label[p.best], [p]))
    return out


def recommend(
    summary: dict[int, dict[str, Cell]], settings: Sequence[Setting], stem: Path | None
) -> str:
    """Per band: the setting, the evidence per concurrency, the values overlay (also to a file)."""
    lines = ["Recommendation (best median output tok/s per concurrency):"]
    for setting, picks in bands(summary, settings):
        lo, hi = picks[0].conc, picks[-1].conc
        name = f"CONC {lo}" if lo == hi else f"CONC {lo}-{hi}"
        lines.append(f"\n{name}: {setting.label}")
        lines += [f"  {p.evidence(summary)}" for p in picks]
        if unsure := [str(p.conc) for p in picks if not p.separated]:
            lines.append(
                f"  not beyond the spread at CONC {', '.join(unsure)}: the runner-up "
                "is as good there; more REPEATS or NUM_PROMPTS would separate them"
            )
        mtp = setting.overlay()["mtp"]
        overlay = "mtp:\n" + "".join(f"  {k}: {str(v).lower()}\n" for k, v in mtp.items())
        if stem is not None:
            path = Path(f"{stem}-values-conc{lo}-{hi}.yaml")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# mtp-tune: {name} -> {setting.label}\n{overlay}")
            lines.append(f"  values overlay ({path}; helm upgrade ... -f {path}):")
        else:
            lines.append("  values overlay:")
        lines += [f"    {line}" for line in overlay.splitlines()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = parser(PROG, "Compare MTP settings per concurrency and recommend one per band.")
    p.add_argument("--settings", default="off 1 2 3", help='e.g. "off 1 2 3"')
    p.add_argument("--urls", default="", help='one endpoint per setting: "off=http://a 3=..."')
    p.add_argument("--profile", default=DEFAULT_PROFILE, help="simulator profile (local mode)")
    p.add_argument(
        "--time-scale",
        type=float_between(0, 10, low_open=True),
        default=1.0,
        help="local: scale *-ms timings",
    )
    p.add_argument(
        "--waves",
        type=positive_int,
        default=3,
        help="prompts per run = waves x concurrency (unless --num-prompts)",
    )
    args, rest = p.parse_known_args(argv)
    sides: list[Side] = []
    try:
        settings = parse_settings(args.settings)
        concs = cli.parse_concs("--concs", args.concs)
        if args.urls.strip():
            urls = parse_urls(args.urls, settings)
            sides = [Side(s.label, urls[s.name]) for s in settings]
        else:
            # every simulator's config built now, before bench_config loads locust: a bad one
            # is one line, not a run, and gevent's patching never follows a refusal
            flags = [sim_flags(args.profile, s, args.time_scale) for s in settings]
        base = bench_config(rest, LOCAL_ENGINE_URL, PROG)
        if sides:
            check_same_model(sides)
    except TargetNotReady as exc:  # as qwen-npu bench: a target that does not answer is 1
        return fail(PROG, str(exc), EXIT_FAILED)
    except (ValueError, OSError) as exc:  # the simulator's ConfigError is a ValueError
        return fail(PROG, str(exc))
    fixed_prompts = any(a.split("=")[0] == "--num-prompts" for a in rest)

    def run_one(config: Any) -> tuple[dict[str, Any], bool]:
        if not fixed_prompts:
            data = replace(config.data, num_prompts=args.waves * config.concurrency)
            config = replace(config, data=data)
        return cli.run_one(config)

    def tables(summary: dict[int, dict[str, Cell]], labels: list[str], stem: Path | None) -> str:
        parts = [f"Concurrency {c}\n{format_many(cells, labels)}" for c, cells in summary.items()]
        return "\n\n".join([*parts, recommend(summary, settings, stem)])

    with contextlib.ExitStack() as stack:
        if sides:
            where = "the given endpoints"
        else:
            # lazy: local mode only: the simulator is the sim extra's
            from qwen_npu.sim.testing import running_sim

            for s, f in zip(settings, flags, strict=True):  # all at once: the runs interleave
                sides.append(Side(s.label, stack.enter_context(running_sim(**f))))
            where = f"local simulators of profile {args.profile} (time scale {args.time_scale})"
        print(f"mtp-tune: settings {', '.join(s.label for s in sides)} on {where}", flush=True)
        return run_and_report(PROG, args, sides, concs, base, run_one, tables)
