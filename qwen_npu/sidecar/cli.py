"""``qwen-npu sidecar``: parse the flags, validate the settings, serve the app with uvicorn."""

from __future__ import annotations

import json

from qwen_npu.cli_parser import fail
from qwen_npu.log import PartLog
from qwen_npu.ports import cannot_listen
from qwen_npu.sidecar.config import Settings, SettingsError, cli_parser, load_settings

DESCRIPTION = (
    "Health probes and qwen_npu_* metrics beside an SGLang engine. Every flag --name-of-it also "
    "reads from its environment variable QWEN_NPU_NAME_OF_IT (--host: QWEN_NPU_SIDECAR_HOST, "
    "--port: QWEN_NPU_SIDECAR_PORT); flags win. The other settings are environment variables "
    "only; docs/sidecar.md lists them all."
)

PROG = "qwen-npu sidecar"
FLAG_PORT = "--port / QWEN_NPU_SIDECAR_PORT"


def main(argv: list[str]) -> int:
    parser, flags = cli_parser(DESCRIPTION)
    parser.add_argument(
        "--check",
        action="store_true",
        help="validate the settings, print them as JSON and exit (0 valid, 2 invalid)",
    )
    args = parser.parse_args(argv)
    try:
        settings = load_settings(cli=flags(parsed_args=args))
    except SettingsError as exc:
        return fail(PROG, str(exc))
    if args.check:
        print(json.dumps(settings.public_dict(), indent=2, sort_keys=True))
        return 0
    return serve(settings)


def serve(settings: Settings) -> int:
    # lazy: an extra's (pyproject.toml); the base install goes without
    import uvicorn
    from prometheus_client import disable_created_metrics

    # lazy: the server's stack loads only when it serves
    from qwen_npu.sidecar.app import create_app

    def busy(why: str | None) -> int:
        where = f"{settings.sidecar_host}:{settings.sidecar_port} ({why})"
        return fail(PROG, f"cannot listen on {where}; pick a free port with {FLAG_PORT}")

    if (why := cannot_listen(settings.sidecar_host, settings.sidecar_port)) is not None:
        return busy(why)
    disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series: half the page, nothing anyone queries
    PartLog("sidecar").setup(settings.log_level, also=("uvicorn", "uvicorn.error"))
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
        return busy(exc.strerror)
    return 0
