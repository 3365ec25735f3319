"""``qwen-npu sidecar``: parse the flags, validate the settings, serve the app with uvicorn.

Why this exists: flags and ``QWEN_NPU_*`` variables meet here (flags win); a bad value ends the
start with one line naming the variable, the flag and the fix (exit 2), never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qwen_npu.cli_parser import OneLineParser
from qwen_npu.serve.sidecar.config import Settings, SettingsError, load_settings


def _parser() -> argparse.ArgumentParser:
    fields = Settings.model_fields
    p = OneLineParser(
        prog="qwen-npu sidecar",
        description="Health probes and qwen_npu_* metrics beside an SGLang engine. Every flag "
        "also reads from its QWEN_NPU_* environment variable; flags win. See docs/sidecar.md.",
    )

    def flag(name: str, field: str, kind: type, env: str) -> None:
        p.add_argument(
            name,
            dest=field,
            type=kind,
            default=None,
            metavar=name.rsplit("-", 1)[-1].upper(),
            help=f"{fields[field].description} [env {env}, default {fields[field].default}]",
        )

    flag("--engine-url", "engine_url", str, "QWEN_NPU_ENGINE_URL")
    flag("--host", "sidecar_host", str, "QWEN_NPU_SIDECAR_HOST")
    flag("--port", "sidecar_port", str, "QWEN_NPU_SIDECAR_PORT")
    flag("--state-dir", "state_dir", Path, "QWEN_NPU_STATE_DIR")
    flag("--model-dir", "model_dir", Path, "QWEN_NPU_MODEL_DIR")
    flag("--tp-size", "tp_size", str, "QWEN_NPU_TP_SIZE")
    p.add_argument(
        "--check",
        action="store_true",
        help="validate the settings, print them as JSON and exit (0 valid, 2 invalid)",
    )
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k != "check" and v is not None}
    try:
        settings = load_settings(**overrides)
    except SettingsError as exc:
        print(f"qwen-npu sidecar: {exc}", file=sys.stderr)
        return 2
    if args.check:
        import json

        print(json.dumps(settings.public_dict(), indent=2, sort_keys=True))
        return 0
    return serve(settings)


def serve(settings: Settings) -> int:
    import uvicorn
    from prometheus_client import disable_created_metrics

    from qwen_npu.serve.ports import cannot_listen
    from qwen_npu.serve.sidecar import logs
    from qwen_npu.serve.sidecar.main import create_app

    busy = cannot_listen(settings.sidecar_host, settings.sidecar_port)
    if busy:
        print(
            f"qwen-npu sidecar: cannot listen on {settings.sidecar_host}:{settings.sidecar_port} "
            f"({busy}); pick a free port with --port / QWEN_NPU_SIDECAR_PORT",
            file=sys.stderr,
        )
        return 2
    disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series: half the page, nothing anyone queries
    logs.setup(settings.log_level)
    try:
        uvicorn.run(
            create_app(settings),
            host=settings.sidecar_host,
            port=settings.sidecar_port,
            log_config=None,
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=5,
        )
    except OSError as exc:
        print(
            f"qwen-npu sidecar: cannot listen on {settings.sidecar_host}:{settings.sidecar_port} "
            f"({exc.strerror}); pick a free port with --port / QWEN_NPU_SIDECAR_PORT",
            file=sys.stderr,
        )
        return 2
    return 0
