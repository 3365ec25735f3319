"""``qwen-npu fetch SOURCE DEST``, ``qwen-npu fetch wait DEST``, ``qwen-npu fetch verify DEST``.

One verb for an engineer (``make fetch``), the chart's staging Job, the engine pods' init container
(``wait``) and ``helm test`` (``verify``). Errors are one line; docs/runbook.md "A fetch stuck or
failing" says what each exit code means.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qwen_npu.cli_parser import (
    EXIT_BAD_INPUT,
    OneLineParser,
    error_line,
    output_dir,
    positive_float,
    positive_int,
)
from qwen_npu.fetch.layout import Revision, Store
from qwen_npu.fetch.source import EXAMPLES, FetchError, load_credentials, parse_source
from qwen_npu.log import PartLog

if TYPE_CHECKING:
    from qwen_npu.preflight import Options

log = PartLog("fetch")

PROG = "qwen-npu fetch"
SUBCOMMANDS = ("wait", "verify")
#: What the closing preflight judges without --profile (qwen_npu.fetch.profile.default_options).
DEFAULT_JUDGED = "the chart's default engine"


#: The transfer's knobs: flag, type, default, help (the default is appended).
_TUNING: tuple[tuple[str, Callable[[str], Any], float, str], ...] = (
    ("--jobs", positive_int, 4, "files at once"),
    ("--read-timeout", positive_float, 60.0, "seconds one read may stall before it is retried"),
    ("--connect-timeout", positive_float, 20.0, ""),
    ("--attempts", positive_int, 6, "tries per file"),
    ("--backoff", positive_float, 2.0, "first pause between tries, doubled up to --max-backoff"),
    ("--max-backoff", positive_float, 120.0, ""),
    ("--lease", positive_float, 120.0, "seconds the DEST lock outlives a dead holder"),
    ("--lock-wait", positive_float, 6 * 3600.0, "seconds to wait for another fetch of DEST"),
    ("--progress-every", positive_float, 30.0, "seconds between progress lines"),
)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description=f"Fetch a checkpoint to DEST and verify it. SOURCE: {EXAMPLES}. Also: "
        f"'{PROG} wait DEST --source SOURCE' (the init container) and '{PROG} verify DEST' "
        "(helm test). Exit 0 done, 1 failed, 2 bad input, 3 no space, 4 timed out.",
    )
    p.add_argument("source", metavar="SOURCE")
    p.add_argument("dest", metavar="DEST", type=output_dir, help="becomes a link to the revision")
    p.add_argument("--revision", help="branch, tag or commit (overrides @revision)")
    tp = p.add_mutually_exclusive_group()
    tp.add_argument("--tp", type=positive_int, help="preflight's TP size")
    tp.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="a chart profile (helm/qwen-npu/profiles/<name>.yaml): preflight judges the engine "
        "the chart deploys from it (TP, SSM dtype, MTP); without it, the chart's default engine",
    )
    p.add_argument(
        "--no-preflight",
        dest="preflight",
        action="store_false",
        help="skip the closing preflight verdict",
    )
    for flag, kind, default, why in _TUNING:
        p.add_argument(flag, type=kind, default=default, help=f"{why} ({default:g})".lstrip())
    p.add_argument(
        "--reverify",
        action="store_true",
        help="re-hash a complete DEST instead of trusting its manifest's sizes",
    )
    p.add_argument("--ca-bundle", metavar="FILE", help="a PEM bundle for a mirror's private CA")
    return p


def _dest_parser(verb: str, description: str, source_help: str) -> argparse.ArgumentParser:
    """``wait`` and ``verify``: DEST, the SOURCE and revision it must hold, sizes only."""
    p = OneLineParser(prog=f"{PROG} {verb}", description=description)
    p.add_argument("dest", metavar="DEST", type=Path)
    p.add_argument("--source", required=verb == "wait", help=source_help)
    p.add_argument("--revision")
    p.add_argument("--sizes-only", action="store_true", help="skip the sha256 re-check")
    return p


def build_wait_parser() -> argparse.ArgumentParser:
    p = _dest_parser(
        "wait",
        "Wait until DEST holds a complete, verified fetch of SOURCE at its revision, logging the "
        "fetch's progress. Exit 0 ready, 1 damaged, 2 bad input, 4 timed out.",
        "SOURCE as given to the fetch",
    )
    p.add_argument("--timeout", type=positive_float, default=6 * 3600.0, help="(21600)")
    p.add_argument("--log-every", type=positive_float, default=60.0, help="(60)")
    p.add_argument("--poll", type=positive_float, default=2.0, help=argparse.SUPPRESS)
    return p


def build_verify_parser() -> argparse.ArgumentParser:
    p = _dest_parser(
        "verify",
        "Check DEST against its manifest: marker, every file, sizes, sha256. Exit 0 sound, 1 not.",
        "also require this SOURCE (and --revision)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object")
    return p


def _preflight(dest: Path, options: Options, judged: str) -> int:
    """Preflight's verdict for the engine ``options`` describe, as one log line."""
    # lazy: a verb loads only what it runs (--help and bad flags stay instant)
    from qwen_npu.preflight import run_preflight
    from qwen_npu.preflight.checkpoint import InputError

    try:
        report = run_preflight(dest, options)
    except InputError as exc:
        why = "the fetched files are not a checkpoint preflight reads: check SOURCE"
        log("error", "preflight", verdict="bad_input", error=exc, next=why)
        return 1
    next_ = f"run: qwen-npu preflight {dest} --tp {report.tp} (the table says why)"
    if judged == DEFAULT_JUDGED:
        next_ += "; --profile judges a chart profile's engine"
    log(
        "info" if report.exit_code == 0 else "error",
        "preflight",
        verdict=report.verdict,
        tp=report.tp,
        tp_source=report.tp_source,
        ssm_dtype=options.mamba_ssm_dtype or "the checkpoint's",
        mtp=options.mtp,
        judged=judged,
        blocking=len(report.blocking),
        first=report.blocking[0].message if report.blocking else None,
        next=next_ if report.exit_code else "ready to serve",
    )
    return report.exit_code


def _check_ca_bundle(path: str) -> None:
    """Refuse an unreadable PEM bundle before any download, loading it as the clients would."""
    # lazy: a verb loads only what it runs (--help and bad flags stay instant)
    import ssl

    if not Path(path).is_file():
        raise FetchError(f"--ca-bundle {path}: no such file", EXIT_BAD_INPUT)
    try:
        ssl.create_default_context(cafile=path)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        why = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
        raise FetchError(
            f"--ca-bundle {path}: not a readable PEM bundle ({why}); pass the mirror CA's "
            "certificates (-----BEGIN CERTIFICATE----- blocks)",
            EXIT_BAD_INPUT,
        ) from None


def _fetch(argv: list[str]) -> int:
    # lazy: a verb loads only what it runs (--help and bad flags stay instant)
    from qwen_npu.fetch.profile import default_options, profile_options
    from qwen_npu.fetch.run import Options as FetchOptions
    from qwen_npu.fetch.run import environ_ca_bundle, fetch
    from qwen_npu.fetch.transfer import Retry

    args = build_parser().parse_args(argv)
    source = parse_source(args.source, args.revision)
    if args.profile:
        options, judged = profile_options(args.profile), f"profile {args.profile}"
    else:
        options, judged = default_options(args.tp), DEFAULT_JUDGED
    load_credentials()
    if args.ca_bundle:
        _check_ca_bundle(args.ca_bundle)
        environ_ca_bundle(args.ca_bundle)
    opts = FetchOptions(
        read_timeout=args.read_timeout,
        connect_timeout=args.connect_timeout,
        retry=Retry(args.attempts, args.backoff, args.max_backoff),
        jobs=args.jobs,
        lease_seconds=args.lease,
        lock_wait_seconds=args.lock_wait,
        progress_seconds=args.progress_every,
        reverify=args.reverify,
    )
    result = fetch(source, args.dest, opts)
    files = len(result.manifest.get("files", []))
    done = f"{files} files verified, {result.downloaded} bytes downloaded"
    done = "already complete, nothing downloaded" if result.reused else done
    print(f"{args.dest}: {source} at {result.revision}: {done}")
    return _preflight(args.dest, options, judged) if args.preflight else 0


def _wait(argv: list[str]) -> int:
    # lazy: a verb loads only what it runs (--help and bad flags stay instant)
    from qwen_npu.fetch.wait import wait

    args = build_wait_parser().parse_args(argv)
    source = parse_source(args.source, args.revision)
    wait(
        Store(args.dest),
        source,
        sums=not args.sizes_only,
        timeout=args.timeout,
        interval=args.log_every,
        poll=args.poll,
    )
    return 0


def _verify(argv: list[str]) -> int:
    # lazy: a verb loads only what it runs (--help and bad flags stay instant)
    from qwen_npu.fetch.wait import matches

    args = build_verify_parser().parse_args(argv)
    current = Store(args.dest).current()
    rev = Revision(current) if current is not None else None
    problems = rev.check(sums=not args.sizes_only) if rev else [f"{args.dest}: not a fetched DEST"]
    marker = (rev.marker() if rev else None) or {}
    if args.source and not problems:
        source = parse_source(args.source, args.revision)
        if not matches(marker, source):
            held, asked = marker.get("source"), marker.get("requested_revision")
            problems = [f"{args.dest}: holds {held}{f'@{asked}' if asked else ''}, not {source}"]
    found = {"revision": marker.get("revision")}
    found["files"] = len(((rev.manifest() if rev else None) or {}).get("files", []))
    if args.json:
        report = {"dest": str(args.dest), "ok": not problems, "problems": problems, **found}
        print(json.dumps(report, sort_keys=True))
    for line in problems:  # the one error shape of every verb (cli_parser.error_line)
        again = f"qwen-npu fetch {marker.get('source', 'SOURCE')} {args.dest}"
        print(error_line(f"{PROG} verify", f"{line}; re-run: {again}"), file=sys.stderr)
    if not problems:
        log("info", "verified", dest=args.dest, **found)
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    command = {"wait": _wait, "verify": _verify}.get(argv[0] if argv else "", _fetch)
    rest = argv[1:] if command is not _fetch else argv
    try:
        return command(rest)
    except FetchError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; re-run to resume (verified files are kept)", file=sys.stderr)
        return 130
