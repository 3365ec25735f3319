"""``qwen-npu sim``: parse flags, build the config, log it with the banner, run uvicorn.

Every config field is a flag of the same kebab-case name; only flags given on the command line
count (so environment and YAML values are not overwritten by flag defaults). Bad input exits 2
with one line naming the source, key and fix.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from qwen_npu.cli_parser import OneLineParser
from qwen_npu.serve.ports import cannot_listen
from qwen_npu.serve.sim.config import (
    FIELDS,
    ConfigError,
    SimConfig,
    build,
    coerce,
    field_kind,
    list_profiles,
)

BANNER = (
    "qwen-npu sim: a SIMULATOR of SGLang 0.5.23's HTTP surface for tests and demos. "
    "It runs no model and its output is synthetic; never point production traffic at it."
)


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="qwen-npu sim",
        description=BANNER + " Precedence: flags > QWEN_NPU_SIM_* env > --config > --profile "
        "> defaults. See docs/simulator.md.",
    )
    p.add_argument("--profile", help=f"named latency profile: {', '.join(list_profiles())}")
    p.add_argument("--config", help="YAML file of key: value (same names as the flags)")
    p.add_argument("--list-profiles", action="store_true", help="print the profiles and exit")
    p.add_argument("--print-config", action="store_true", help="print the config and exit")
    defaults = SimConfig()
    for key, f in FIELDS.items():
        kind = field_kind(f)
        default = getattr(defaults, f.name)
        help_ = f"{f.metadata['help']} (default: {default})"
        if kind == "bool":
            p.add_argument(
                f"--{key}",
                nargs="?",
                const="true",
                default=None,
                metavar="BOOL",
                help=help_,
            )
        else:
            p.add_argument(f"--{key}", default=None, metavar=kind.rstrip("?").upper(), help=help_)
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The namespace and the typed flags given on the command line (kebab-case keys)."""
    ns = _parser().parse_args(argv)
    flags: dict[str, Any] = {}
    for key, f in FIELDS.items():
        raw = getattr(ns, f.name)
        if raw is not None:
            flags[key] = coerce(key, raw, "flag")
    return ns, flags


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
        stream=sys.stderr,
    )


def main(argv: list[str]) -> int:
    try:
        ns, flags = parse(argv)
        if ns.list_profiles:
            print("\n".join(list_profiles()))
            return 0
        cfg, origin = build(flags, profile=ns.profile, config_file=ns.config)
    except ConfigError as exc:
        print(f"qwen-npu sim: {exc}", file=sys.stderr)
        return 2
    if ns.print_config:
        print(json.dumps(cfg.as_dict(), indent=2))
        return 0
    setup_logging(cfg.log_level)
    log = logging.getLogger("qwen_npu.sim")
    log.warning("event=banner what=%r", BANNER)
    log.info(
        "event=config effective=%s from=%s",
        json.dumps(cfg.as_dict(), separators=(",", ":")),
        json.dumps(origin, separators=(",", ":")),
    )
    return serve(cfg)


def serve(cfg: SimConfig) -> int:
    """Run the server in the foreground until SIGINT/SIGTERM."""
    import uvicorn
    from prometheus_client import disable_created_metrics

    from qwen_npu.serve.sim.app import RawSend, create_app, stamped_protocol
    from qwen_npu.serve.sim.clock import new_loop

    disable_created_metrics()  # type: ignore[no-untyped-call]  # SGLang's multiprocess exposition has no *_created series
    config = uvicorn.Config(
        RawSend(create_app(cfg)),
        host=cfg.host,
        port=cfg.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_keep_alive=30,
        backlog=4096,
        timeout_graceful_shutdown=3,  # hung requests (faults) must not block SIGTERM
        http=stamped_protocol(),
    )
    server = uvicorn.Server(config)
    log = logging.getLogger("qwen_npu.sim")
    busy = cannot_listen(cfg.host, cfg.port)
    if busy:
        log.error(
            "event=cannot_listen host=%s port=%d error=%r "
            "next='pick a free --port or check --host'",
            cfg.host,
            cfg.port,
            busy,
        )
        return 1
    log.info(
        "event=listening url=http://%s:%d next='curl http://%s:%d/health'",
        cfg.host,
        cfg.port,
        cfg.host,
        cfg.port,
    )
    try:
        # The loop polls through clock.StampingSelector: arrivals are stamped at the poll.
        with asyncio.Runner(loop_factory=new_loop) as runner:
            runner.run(server.serve())
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it handled after a clean shutdown
        log.info("event=stopped reason=SIGINT")
        return 0
    except OSError as exc:
        log.error("event=cannot_listen error=%r next='pick a free --port'", str(exc))
        return 1
    except SystemExit:  # uvicorn exits (code 3) when the bind fails after all; it logged why
        log.error("event=cannot_listen next='pick a free --port or check --host'")
        return 1
    if not server.started:
        log.error("event=cannot_listen next='pick a free --port or check --host'")
        return 1
    return 0
