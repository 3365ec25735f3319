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
from qwen_npu.sim.config import FIELDS, ConfigError, build, list_profiles

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
    return (
        "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


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
        flag = _metavar(f) == "BOOL"  # a bare --garbled is true
        # numbers range-checked by the parser from the field's limits ("none" clears an optional)
        number = field_number(f, none_words=("", "none", "null") if f.default is None else ())
        p.add_argument(
            f"--{key}",
            nargs="?" if flag else None,
            const="true" if flag else None,
            metavar=_metavar(f),
            type=number or str,
            help=f"{f.description} (default: {_shown(f.default)})",
        )
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The namespace and the flags given on the command line (kebab-case keys)."""
    ns = _parser().parse_args(argv)
    raw = {key: getattr(ns, key.replace("-", "_")) for key in FIELDS}
    return ns, {k: v for k, v in raw.items() if v is not None}


def main(argv: list[str]) -> int:
    try:
        ns, flags = parse(argv)
        if ns.list_profiles:
            print("\n".join(list_profiles()))
            return 0
        cfg, origin = build(flags, profile=ns.profile, config_file=ns.config)
    except ConfigError as exc:
        return fail("qwen-npu sim", str(exc))
    # kebab-case keys, as GET /sim/config shows them
    effective = cfg.model_dump(mode="json", by_alias=True)
    if ns.print_config:
        print(json.dumps(effective, indent=2))
        return 0
    shared_log.setup("sim", cfg.log_level, also=("uvicorn", "uvicorn.error"))
    log = shared_log.PartLog("sim")
    log("warning", "banner", what=BANNER)
    log(
        "info",
        "config",
        effective=json.dumps(effective, separators=(",", ":")),
        **{"from": json.dumps(origin, separators=(",", ":"))},
    )
    # lazy: the server's stack loads only when it serves (--help, --list-profiles)
    from qwen_npu.sim.server import serve

    return serve(cfg)
