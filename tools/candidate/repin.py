"""``make sglang-candidate REPIN=1``: move the pins to a candidate whose report is green.

Why this exists: after a report says keep / re-pin (and drop) for every patch, the by-hand rest
is mechanical and easy to get half right: the new fingerprints and parameter lists in each
patch's ``PINS``, ``SGLANG_VERSION`` in docker/versions.env (and an ``ARG SGLANG_VERSION=``
default, should a Dockerfile carry one; the chart names no SGLang version, its image tag carries
qwen-npu's), and the carried sources the next diff starts from (``pinned_sglang.json``, written
from the candidate's tree). It refuses when the report is not green (a patch to port, a failing
contract link or contract test) and always in CI (``CI=true``): moving pins is a maintainer's
reviewed change, not a job's.

The edits are textual and small: in a patch module the old fingerprint's string literal is
replaced, and the parameter tuple of the same ``core.Pin(...)`` call when it changed; nothing else
in the file moves.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.candidate import report, sources

#: The one file that names the SGLang release (make, docker build and Python read it), and the
#: line that does; VERSION_DEFAULTS are copies a file may still carry as defaults (an engine
#: Dockerfile's ``ARG SGLANG_VERSION=<x>``), moved too when present.
VERSION_FILE = ("docker/versions.env", r"^(SGLANG_VERSION=)(\S+)$")
VERSION_DEFAULTS = ("docker/*.Dockerfile", r"^(ARG SGLANG_VERSION=)(\S+)$")


def in_ci(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    return environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _tuple_text(params: Sequence[str], col: int) -> str:
    one = "(" + ", ".join(f'"{p}"' for p in params) + ("," if len(params) == 1 else "") + ")"
    if col + len(one) <= 96:
        return one
    inner = " " * (col + 4)
    return "(\n" + "".join(f'{inner}"{p}",\n' for p in params) + " " * col + ")"


def rewrite_pin(source: str, old_fingerprint: str, fingerprint: str, params: Sequence[str]) -> str:
    """``source`` with the ``core.Pin(...)`` holding ``old_fingerprint`` given the new values."""
    tree = ast.parse(source)
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and any(isinstance(a, ast.Constant) and a.value == old_fingerprint for a in node.args)
    ]
    if len(calls) != 1 or len(calls[0].args) != 4:
        raise LookupError(f"no single core.Pin(...) holds the fingerprint {old_fingerprint[:16]}")
    call = calls[0]
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def span(node: ast.expr) -> tuple[int, int]:
        assert node.end_lineno is not None and node.end_col_offset is not None
        start = offsets[node.lineno - 1] + len(
            lines[node.lineno - 1].encode()[: node.col_offset].decode()
        )
        end = offsets[node.end_lineno - 1] + len(
            lines[node.end_lineno - 1].encode()[: node.end_col_offset].decode()
        )
        return start, end

    edits = [(span(call.args[3]), f'"{fingerprint}"')]
    params_node = call.args[2]
    current = ast.literal_eval(params_node) if isinstance(params_node, ast.Tuple) else None
    if current is None or tuple(current) != tuple(params):
        if not isinstance(params_node, ast.Tuple):
            raise LookupError("the pin's parameters are not a tuple literal; edit them by hand")
        edits.append((span(params_node), _tuple_text(params, params_node.col_offset)))
    for (start, end), text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    return source


def move_version(checkout: Path, version: str) -> list[str]:
    """Set the release in versions.env (and any default copy of it); the files changed."""
    relative, pattern = VERSION_FILE
    sites = [(checkout / relative, pattern, True)]
    glob, default = VERSION_DEFAULTS
    sites += [(path, default, False) for path in sorted(checkout.glob(glob))]
    changed = []
    for path, line, required in sites:
        text = path.read_text(encoding="utf-8")
        new, count = re.subn(line, lambda m: m.group(1) + version, text, flags=re.MULTILINE)
        if count == 0 and required:
            raise LookupError(f"{path.relative_to(checkout)}: no line matches {line}")
        if new != text:
            path.write_text(new, encoding="utf-8")
            lines = f"{count} line{'s' if count > 1 else ''}"
            changed.append(f"{path.relative_to(checkout)} ({lines})")
    return changed


def _module_path(checkout: Path, module: str) -> Path:
    return checkout / (module.replace(".", "/") + ".py")


def repin(
    *,
    checkout: Path,
    version: str,
    rows: Sequence[report.PatchRow],
    links: Sequence[report.LinkRow],
    changes: Sequence[sources.Change],
    sglang_dir: Path,
    contract_tests: report.TestFile,
    pinned_file: Path,
) -> int:
    """Write the new pins when the report allows it; 0 when written, 1 when refused."""
    if in_ci():
        print("--repin: refused: CI is set; moving the pins is a reviewed change, run it by hand",
              file=sys.stderr)  # fmt: skip
        return 1
    if not report.movable(rows, links) or not contract_tests.green:
        why = [f"{r.name} ({r.verdict})" for r in rows if r.verdict == report.PORT]
        why += [f"gdn_contract.{link.name} (fail)" for link in links if link.verdict == "fail"]
        if not contract_tests.green:
            why.append(f"{contract_tests.path} ({contract_tests.said})")
        print(f"--repin: refused: not green on {version}: {', '.join(why)}", file=sys.stderr)
        return 1
    written = []
    pins = sources.patch_pins()
    for row in rows:
        if row.verdict != report.REPIN:
            continue
        module, pinned = pins[row.name]
        path = _module_path(checkout, module)
        text = path.read_text(encoding="utf-8")
        for pin in pinned:
            change = next(
                (c for c in row.changes if c.unit.selector == pin.qualname and c.candidate), None
            )
            if change is None or change.candidate is None or change.kind == sources.UNCHANGED:
                continue
            params = change.candidate.params or pin.params
            text = rewrite_pin(text, pin.fingerprint, change.candidate.fingerprint, params)
            written.append(f"{path.relative_to(checkout)}: {pin.qualname}")
        path.write_text(text, encoding="utf-8")
    written += move_version(checkout, version)
    pinned_file.write_text(sources.dump(sources.snapshot(sglang_dir, version)), encoding="utf-8")
    written.append(f"{pinned_file.name} (the pinned sources, from {sglang_dir})")
    print(f"--repin: SGLang {version}: " + "; ".join(written), file=sys.stderr)
    print("--repin: next: make setup (.venv moves to the new release), make test, review git diff",
          file=sys.stderr)  # fmt: skip
    return 0
