"""The one command line, ``qwen-npu <verb>``, and the one list of its verbs (``VERBS``; a message
may name only these). It imports a verb's module lazily, so that ``qwen-npu preflight`` in the
engine image never imports the sidecar's libraries."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

from qwen_npu import __version__
from qwen_npu.cli_parser import fail, run_verb

# verb -> (module, one-line help). Each module exposes ``main(argv: list[str]) -> int``.
VERBS: dict[str, tuple[str, str]] = {
    "preflight": ("qwen_npu.preflight.cli", "check a checkpoint before a long model load"),
    "ub-plan": ("qwen_npu.hardware.ub_plan", "plan the mamba scatter's h_block_size for the UB"),
    "patches": ("qwen_npu.patches.cli", "list, verify and explain the runtime patches"),
    "sim": ("qwen_npu.sim.cli", "run the SGLang-protocol simulator (tests and demos)"),
    "sidecar": ("qwen_npu.sidecar.cli", "run the health and metrics sidecar"),
    "fetch": ("qwen_npu.fetch.cli", "fetch a checkpoint from ModelScope, Hugging Face, OBS or S3"),
    "bench": ("qwen_npu.loadtest.cli", "run the load test and print the table"),
    "bench-compare": ("qwen_npu.loadtest.compare", "the same load against two endpoints, A/B"),
    "mtp-tune": ("qwen_npu.loadtest.tune", "which MTP setting per concurrency band"),
    "oncall": (
        "qwen_npu.oncall.cli",
        "on-call switches: status, mtp-off/on, patch-off/on, rollback",
    ),
    "dashboards": ("qwen_npu.observability.cli", "generate dashboards and alert rules"),
    "qualify": ("qwen_npu.qualify.cli", "qualify a deployment: claims, verdicts, one report"),
}


def _usage() -> str:
    width = max(len(v) for v in VERBS)
    lines = ["usage: qwen-npu <verb> [options]", "", "verbs:"]
    lines += [f"  {verb.ljust(width)}  {help_}" for verb, (_, help_) in VERBS.items()]
    lines += ["", "Run 'qwen-npu <verb> --help' for a verb's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        return run_verb("qwen-npu", lambda _: print(_usage()), [])
    if args[0] in ("-V", "--version"):
        return run_verb("qwen-npu", lambda _: print(__version__), [])
    verb, rest = args[0], args[1:]
    if verb not in VERBS:
        return fail("qwen-npu", f"unknown verb {verb!r}; see: qwen-npu --help (the verbs)")
    module_name, _ = VERBS[verb]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        return fail(
            f"qwen-npu {verb}",
            f"cannot import {module_name} ({exc}); install the part's extra, e.g. pip install "
            "'qwen-npu[sidecar]', or run make setup",
        )
    entry: Callable[[list[str]], int] = module.main
    # the edge (cli_parser.run_verb): a closed stdout, Ctrl-C and a file or value the verb did not
    # catch end in one line and the exit code of docs/cli.md, never a traceback
    return run_verb(f"qwen-npu {verb}", entry, rest)


if __name__ == "__main__":
    raise SystemExit(main())
