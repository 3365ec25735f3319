"""``qwen-npu patches list | verify [--strict] [--json] | explain NAME``.

Why: the image build must fail when a patch no longer fits the installed SGLang, and an on-call
engineer needs to see which patches exist, their state and when each can go. Strictness follows
the engine's mode (``modes``): a problem in code the mode does not run is a warning, not a failure.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
import textwrap
import warnings
from typing import Any

from qwen_npu.checkpoint import model_config
from qwen_npu.cli_parser import OneLineParser, error_line, fail
from qwen_npu.log import PartLog, line
from qwen_npu.patches import buildcheck, core, gdn_contract, hook, modes, state
from qwen_npu.patches.registry import (
    ENV_DISABLE,
    GDN_CONTRACT,
    OK_STATES,
    PATCHES,
    disabled_patches,
    get_patch,
)

Rows = list[dict[str, Any]]


def verify_all() -> Rows:
    """Import every target, apply every patch, return one row per patch (registry order)."""
    hook.install()
    rows = []
    for info in PATCHES:
        failed: str | None = None
        for name in hook.TRIGGERS[info.module]:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    importlib.import_module(name)
            except Exception as exc:  # SGLang or sgl-kernel-npu not importable
                failed = f"cannot import {name}: {type(exc).__name__}: {exc}"
                break
        module = importlib.import_module(info.module)
        if failed is not None and info.name not in core.OUTCOMES:
            outcome = core.record(info, "target-missing", failed)
        else:
            outcome = module.apply()
        row: dict[str, Any] = dict(outcome.as_dict())
        if outcome.state == "applied" and not module.active():
            row["state"] = "drifted"
            row["detail"] = "applied, but the target no longer points at the patch (rebound)"
        rows.append(row)
    return rows


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _print_table(rows: Rows) -> None:
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name'].ljust(width)}  {r['state']:<15} {r['detail']}")


def _cmd_list(args: argparse.Namespace) -> int:
    disabled, _ = disabled_patches(os.environ)
    rows = [
        {
            "name": p.name,
            "target": p.target,
            "upstream_pr": p.upstream_pr,
            "disabled_by_env": p.name in disabled,
        }
        for p in PATCHES
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(p.name) for p in PATCHES)
    for p in PATCHES:
        flag = f"  (disabled by {ENV_DISABLE})" if p.name in disabled else ""
        print(f"{p.name.ljust(width)}  {p.target}{flag}")
    return 0


def _cmd_verify_build(args: argparse.Namespace) -> int:
    report = buildcheck.build_check(args.site, npu=args.npu)
    rows = report["patches"]
    bad = [r for r in rows if r["state"] != buildcheck.BUILD_OK]
    idle = [r for r in rows if r.get("effect") == "ignored"]
    if args.json:
        print(json.dumps(report | {"strict": args.strict}, indent=2))
    else:
        print(
            f"build check on Python {report['python']}"
            + (f", sources from {args.site}" if args.site else "")
        )
        _print_table(rows)
        for r in rows:
            if "effect" in r:
                print(f"{r['name']}: kernel {r['effect']}: {r['effect_detail']}")
        hook_state = "ok" if report["pth_hook"]["ok"] else "MISSING"
        print(f"pth hook: {hook_state}: {report['pth_hook']['detail']}")
        for link, v in report["gdn_contract"].items():
            print(f"gdn contract {link}: {v['verdict']}: {v['evidence']}")
        for r in bad:
            _err(f"{r['name']}: {r['state']}: next: {buildcheck.NEXT_STEP[r['state']]}")
        for r in idle:
            _err(f"{r['name']}: kernel ignores h_block_size: next: {core.NEXT_WITHOUT_EFFECT}")
    return 1 if (args.strict and not report["ok"]) else 0


NEXT_UNUSED = (
    "the mode does not run this code, so the pod starts; fix it before switching mode "
    "(docs/runbook.md QwenNpuPatchNotApplied, docs/patches.md 'Strictness by mode')"
)


def _startup_line(
    rows: Rows, bad: Rows, unknown: list[str], unused: list[str], mode: modes.Mode | None
) -> str:
    """The one line the entrypoint prints before the model load (``qwen_npu.log``'s shape)."""
    states = ",".join(f"{r['name']}={r['state']}" for r in rows)
    said = mode.describe() if mode is not None else None
    if not (bad or unknown):
        extra = {"unused_problems": ",".join(unused), "next": NEXT_UNUSED} if unused else {}
        level = "warning" if unused else "info"
        return line(
            "patches", level, "verify_passed", patches=len(rows), states=states, mode=said, **extra
        )
    failed = ",".join(f"{r['name']}={r['state']}" for r in bad) or "none"
    why = "; ".join(f"{r['name']}: {r['detail']}" for r in bad)
    if unknown:
        why = f"unknown names in QWEN_NPU_DISABLE_PATCHES: {','.join(unknown)}; {why}"
    first = bad[0]["state"] if bad else ""
    nxt = core.NEXT_STEP.get(first) or gdn_contract.NEXT.get(first) or "fix " + ENV_DISABLE
    nxt += "; qwen-npu patches explain NAME; patches.disabled turns one off"
    return line("patches", "error", "verify_failed", failed=failed, detail=why, next=nxt)


def _bad_input(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags (before SGLang is imported, which takes seconds), or None."""
    if not args.build:
        given = [flag for flag, on in (("--site", args.site), ("--npu", args.npu)) if on]
        if given:
            return f"{' and '.join(given)} only with --build (the image build's check)"
    elif args.site is not None and not os.path.isdir(args.site):
        return f"--site {args.site}: no such folder; pass the site-packages folder SGLang is in"
    dtype = args.mamba_ssm_dtype
    if args.engine_args is not None:
        dtype = modes.flag_value(args.engine_args, "--mamba-ssm-dtype") or dtype
    if dtype is not None and dtype not in model_config.SSM_DTYPES:
        return (
            f"--mamba-ssm-dtype {dtype}: not a state dtype SGLang takes; use one of "
            f"{', '.join(model_config.SSM_DTYPES)}"
        )
    if args.model_path is not None:
        try:
            model_config.read_model_config(args.model_path)
        except (model_config.ModelConfigError, OSError) as exc:
            return f"--model-path {args.model_path}: {exc}"
    return None


def _contract_argv(args: argparse.Namespace) -> list[str] | None:
    """The engine's command line, else this verb's model and dtype flags, else None (sys.argv)."""
    if args.engine_args is not None:
        return list(args.engine_args)
    own = [("--model-path", args.model_path), ("--mamba-ssm-dtype", args.mamba_ssm_dtype)]
    argv = [part for flag, value in own if value is not None for part in (flag, value)]
    return argv or None


def _cmd_verify(args: argparse.Namespace) -> int:
    problem = _bad_input(args)
    if problem is not None:
        return fail("qwen-npu patches verify", problem)
    if args.build:
        return _cmd_verify_build(args)
    logger = PartLog("patches").logger()
    level = logger.level
    if args.startup or not args.log:
        # the table (or the one start-up line) says each fact once; the state file keeps them
        logger.setLevel("CRITICAL")
    elif "QWEN_NPU_PATCH_LOG_LEVEL" not in os.environ:
        logger.setLevel("WARNING")  # the table says what the INFO lines would
    mode = modes.current()
    if args.engine_args is not None:
        mode = modes.from_argv(args.engine_args, os.environ)
    argv = _contract_argv(args)
    sources = gdn_contract.Sources(argv=argv) if argv else None
    if not (args.startup or args.json):
        _err(
            "qwen-npu patches verify: importing SGLang's targets and applying the patches (10-20 s)"
        )
    try:
        # the mode also goes into the state file's used_by_mode, written while applying
        with modes.overridden(mode):
            rows = verify_all()
        contract = gdn_contract.check(sources)
    finally:
        logger.setLevel(level)
    for row in rows:
        row["used_by_mode"] = None if mode is None else modes.uses(get_patch(row["name"]), mode)
    broken, accepted, unused_links = gdn_contract.strict_problems(contract, mode)
    problems = [
        r
        for r in rows
        if r["state"] not in OK_STATES or (r["state"] == "applied" and r.get("effect") == "ignored")
    ]
    unused = [r for r in problems if r["used_by_mode"] is False]
    bad = [r for r in problems if r not in unused and r["state"] not in OK_STATES]
    idle = [r for r in problems if r not in unused and r["state"] in OK_STATES]
    unused_names = [f"{r['name']}={r['state']}" for r in unused] + [
        f"gdn_contract.{n}={contract[n].verdict}" for n in unused_links
    ]
    _, unknown = disabled_patches(os.environ)
    if args.startup:
        links = [{"name": f"gdn_contract.{n}", "state": "fail", "detail": contract[n].evidence}
                 for n in broken]  # fmt: skip
        failing = bad + idle + links
        print(_startup_line(rows, failing, unknown, unused_names, mode), flush=True)
        return 1 if (failing or unknown) else 0
    if unknown:  # a misspelt kill switch switches nothing off: --strict must not pass it
        known = ", ".join(p.name for p in PATCHES)
        _err(
            error_line(
                "qwen-npu patches verify",
                f"{ENV_DISABLE}: unknown patch name(s) {', '.join(unknown)}; "
                f"use 'all' or one of: {known} (chart value patches.disabled)",
            )
        )
    if args.json:
        out = {
            "ok": not (bad or idle or unknown or broken),
            "strict": args.strict,
            "mode": None if mode is None else mode.as_dict(),
            "unused_problems": unused_names,
            "patches": rows,
            "gdn_contract": gdn_contract.as_json(contract),
        }
        print(json.dumps(out, indent=2))
    else:
        _print_table(rows)
        if missing := _missing_stack(rows, contract):
            _err(missing)
        width = max(len(name) for name in contract)
        for name, v in contract.items():
            print(f"gdn_contract {name.ljust(width)}  {v.verdict:<8} {v.evidence}")
        # the table above holds each state: below, each next step once, with the names it is for
        steps: dict[str, list[str]] = {}
        for r in bad:
            steps.setdefault(core.NEXT_STEP[r["state"]], []).append(r["name"])
        for r in idle:
            steps.setdefault(core.NEXT_WITHOUT_EFFECT, []).append(r["name"])
        for step, names in steps.items():
            _err(f"next ({', '.join(names)}): {step}")
    if unused_names:
        said = mode.describe() if mode else ""
        _err(f"not used by this mode ({said}): {', '.join(unused_names)}: next: {NEXT_UNUSED}")
    _explain_contract(contract, broken, accepted, argv is not None)
    return 1 if (args.strict and (bad or idle or unknown or broken)) else 0


#: What SGLang's NPU modules import that a CPU environment lacks, and where each comes from.
_STACK = {
    "torchvision": "torchvision (SGLang's model code imports it; the CPU test venv has none)",
    "sgl_kernel_npu": "sgl_kernel_npu (sgl-kernel-npu's release wheels: NPU images only)",
    "torch_npu": "torch_npu (Ascend's torch: NPU images only)",
}


def _missing_stack(rows: Rows, contract: dict[str, gdn_contract.Verdict]) -> str:
    """Why the states are this environment's, not the pinned SGLang's, if a package is lacking."""
    texts = [str(r.get("detail", "")) for r in rows] + [v.evidence for v in contract.values()]
    lacking = [what for name, what in _STACK.items() if any(f"'{name}'" in t for t in texts)]
    if not lacking:
        return ""
    return (
        f"qwen-npu patches verify: this environment lacks {'; '.join(lacking)}, so SGLang's "
        "modules do not import and the states above are this environment's; next: `make "
        "verify-patches` (the pinned SGLang with the CPU stand-ins) or `qwen-npu patches verify "
        "--build` in the engine image (the real stack)"
    )


def _explain_contract(
    contract: dict[str, gdn_contract.Verdict], broken: list[str], accepted: list[str], given: bool
) -> None:
    """On stderr: each next step once, then why the ledger accepts the unknown links (their own
    evidence when a command line was ``given``: the ledger's why is about an image build)."""
    for verdict in (gdn_contract.FAIL, gdn_contract.UNKNOWN):
        if names := [n for n in broken if contract[n].verdict == verdict]:
            _err(f"gdn_contract next ({', '.join(names)}): {gdn_contract.NEXT[verdict]}")
    if accepted:
        why = "; ".join(
            f"{link.name}: " + (contract[link.name].evidence if given else link.unknown_why)
            for link in GDN_CONTRACT
            if link.name in accepted
        )
        _err(f"gdn_contract: unknown, accepted by the ledger: {why}")


def _cmd_explain(args: argparse.Namespace) -> int:
    try:
        info = get_patch(args.name)
    except KeyError as exc:
        return fail("qwen-npu patches explain", str(exc.args[0]))
    entry = (state.read_state(state.state_dir_from_env()) or {}).get("patches", {}).get(info.name)
    # the module's top block: What, Why, How, Upstream, Remove when
    doc = importlib.import_module(info.module).__doc__ or ""
    parts = re.split(r"^(What|Why|How|Upstream|Remove when):", doc, flags=re.M)
    block = {
        name: " ".join(text.split()) for name, text in zip(parts[1::2], parts[2::2], strict=True)
    }
    lines = [
        f"patch:        {info.name}",
        f"target:       {info.target}",
        f"module:       {info.module}",
        f"upstream PR:  {info.upstream_pr}",
    ]
    for name in ("What", "Why", "Remove when"):
        lines += [
            f"{name.lower()}:",
            *textwrap.wrap(block.get(name, ""), 96, initial_indent="  ", subsequent_indent="  "),
        ]
    lines.append(f"kill switch:  {ENV_DISABLE}={info.name}")
    if entry is not None:
        lines.append(
            f"state file:   {entry.get('state')} (pid {entry.get('pid')}): {entry.get('detail')}"
        )
    print("\n".join(lines))
    return 0


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="qwen-npu patches",
        description="List, verify and explain qwen-npu's runtime patches for SGLang.",
    )
    sub = p.add_subparsers(dest="command")
    ls = sub.add_parser("list", help="the patches, their targets and upstream PR")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_cmd_list)
    ver = sub.add_parser("verify", help="import SGLang's targets and report each patch's state")
    switches = {
        "--strict": "exit 1 unless all applied/upstream-fixed",
        "--json": None,
        "--log": "also print the patches' log lines (the table says each state once without them)",
        "--build": "the image build's check: read the installed sources, import no SGLang (no NPU)",
        "--npu": "with --build: the NPU image (real sgl-kernel-npu): unreadable kernel links fail",
        "--startup": "strict, one log line (the entrypoint's check before the model load)",
    }
    for flag, why in switches.items():
        ver.add_argument(flag, action="store_true", help=why)
    # Read by the GDN contract's ssm_dtype link (from the command line, as in the engine).
    ver.add_argument("--model-path", metavar="DIR", help="the checkpoint whose config.json to read")
    ver.add_argument("--mamba-ssm-dtype", choices=model_config.SSM_DTYPES, help="the engine's")
    ver.add_argument("--site", metavar="DIR", help="with --build: SGLang's site-packages folder")
    ver.add_argument(
        "--engine-args",
        nargs=argparse.REMAINDER,
        metavar="ARG",
        help="last: the engine's command line; strictness follows its mode (MTP, state dtype)",
    )
    ver.set_defaults(func=_cmd_verify)
    ex = sub.add_parser("explain", help="what a patch does, why, and when to remove it")
    ex.add_argument("name")
    ex.set_defaults(func=_cmd_explain)
    return p


def main(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv or ["list"])
    return int(args.func(args))
