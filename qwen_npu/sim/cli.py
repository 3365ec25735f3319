"""``qwen-npu sim``: one flag per config field, the config built and logged with the banner, served.

Only flags given on the command line count, so they do not hide environment and YAML values with
their defaults.
"""

from __future__ import annotations

import argparse
import json
import typing
from typing import Any

from pydantic.fields import FieldInfo

from qwen_npu import log as shared_log
from qwen_npu._pins import SGLANG_VERSION
from qwen_npu.cli_parser import OneLineParser, fail, field_number
from qwen_npu.sim.config import FIELDS, ConfigError, SimConfig, build, list_profiles

BANNER = (
    f"qwen-npu sim: a SIMULATOR of SGLang {SGLANG_VERSION}'s HTTP surface for tests and demos. "
    "It runs no model and its output is synthetic; never point production traffic at it."
)


def _metavar(f: FieldInfo) -> str:
    """BOOL, INT, FLOAT, FLOATS (comma-separated) or STR, from the field's type."""
    args = typing.get_args(f.annotation) or (f.annotation,)
    t = next(a for a in args if a is not type(None))
    if typing.get_origin(t) is list:
        return "FLOATS"
    return {bool: "BOOL", int: "INT", float: "FLOAT"}.get(t, "STR")


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="qwen-npu sim",
        description=BANNER + " Precedence: flags > QWEN_NPU_SIM_* env > --config > --profile "
        "> defaults. See docs/simulator.md.",
    )
    p.add_argument("--profile", help=f"named latency profile: {', '.join(list_profiles())}")
    p.add_argument(
        "--config", metavar="FILE", help="YAML file of key: value (same names as the flags)"
    )
    p.add_argument("--list-profiles", action="store_true", help="print the profiles and exit")
    p.add_argument("--print-config", action="store_true", help="print the config and exit")
    for key, f in FIELDS.items():
        metavar = _metavar(f)
        help_ = f"{f.description} (default: {_shown(f.default)})"
        if metavar == "BOOL":
            p.add_argument(
                f"--{key}",
                nargs="?",
                const="true",
                default=None,
                metavar="BOOL",
                help=help_,
            )
        else:
            # numbers range-checked by the parser, from the field's limits ("none" clears an
            # optional one)
            number = field_number(f, none_words=("", "none", "null") if f.default is None else ())
            p.add_argument(
                f"--{key}", default=None, metavar=metavar, type=number or str, help=help_
            )
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The namespace and the flags given on the command line (kebab-case keys)."""
    ns = _parser().parse_args(argv)
    raw = {key: getattr(ns, key.replace("-", "_")) for key in FIELDS}
    return ns, {k: v for k, v in raw.items() if v is not None}


def effective(cfg: SimConfig) -> dict[str, Any]:
    """The config with kebab-case keys (the start log, --print-config and GET /sim/config)."""
    return cfg.model_dump(mode="json", by_alias=True)


def setup_logging(level: str) -> None:
    """The simulator's lines (and uvicorn's) in the shared shape (qwen_npu/log.py)."""
    shared_log.setup("sim", level, also=("uvicorn", "uvicorn.error"))


def main(argv: list[str]) -> int:
    try:
        ns, flags = parse(argv)
        if ns.list_profiles:
            print("\n".join(list_profiles()))
            return 0
        cfg, origin = build(flags, profile=ns.profile, config_file=ns.config)
    except ConfigError as exc:
        return fail("qwen-npu sim", str(exc))
    if ns.print_config:
        print(json.dumps(effective(cfg), indent=2))
        return 0
    setup_logging(cfg.log_level)
    log = shared_log.PartLog("sim")
    log("warning", "banner", what=BANNER)
    log(
        "info",
        "config",
        effective=json.dumps(effective(cfg), separators=(",", ":")),
        **{"from": json.dumps(origin, separators=(",", ":"))},
    )
    return serve(cfg)


def serve(cfg: SimConfig) -> int:
    """Run the server in the foreground until SIGINT, or SIGTERM and a drain (sim/server.py)."""
    # lazy: the server's stack loads only when it serves (--help, --list-profiles)
    from qwen_npu.sim.server import serve as run_server

    return run_server(cfg)
