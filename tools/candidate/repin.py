"""``make sglang-candidate REPIN=1``: move the pins to a candidate whose report is green.

Why: the rest is mechanical and easy to get half right: the new fingerprints and parameters in each
patch's ``PINS`` (only the literals change), ``SGLANG_VERSION`` in docker/versions.env (its one
home) and the carried sources. Refused when the report is not green, and in CI: a reviewed change.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.candidate import report, sources

VERSION_FILE = "docker/versions.env"
VERSION_LINE = r"^(SGLANG_VERSION=)(\S+)$"


def _tuple_text(params: Sequence[str], col: int) -> str:
    one = "(" + ", ".join(f'"{p}"' for p in params) + ("," if len(params) == 1 else "") + ")"
    if col + len(one) <= 96:
        return one
    inner = " " * (col + 4)
    return "(\n" + "".join(f'{inner}"{p}",\n' for p in params) + " " * col + ")"


def rewrite_pin(source: str, old_fingerprint: str, fingerprint: str, params: Sequence[str]) -> str:
    """``source`` with the ``core.Pin(...)`` holding ``old_fingerprint`` given the new values."""
    calls = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and any(isinstance(a, ast.Constant) and a.value == old_fingerprint for a in node.args)
    ]
    if len(calls) != 1 or len(calls[0].args) != 4:
        raise LookupError(f"no single core.Pin(...) holds the fingerprint {old_fingerprint[:16]}")
    call, params_node = calls[0], calls[0].args[2]
    if not isinstance(params_node, ast.Tuple):
        raise LookupError("the pin's parameters are not a tuple literal; edit them by hand")
    old_call = str(ast.get_source_segment(source, call))
    new_call = old_call.replace(
        str(ast.get_source_segment(source, call.args[3])), f'"{fingerprint}"'
    )
    if tuple(ast.literal_eval(params_node)) != tuple(params):
        old_params = str(ast.get_source_segment(source, params_node))
        new_params = _tuple_text(params, params_node.col_offset)
        new_call = new_call.replace(old_params, new_params, 1)
    return source.replace(old_call, new_call)


def move_version(checkout: Path, version: str) -> str:
    """Set the release in versions.env; the file changed."""
    path = checkout / VERSION_FILE
    text = path.read_text(encoding="utf-8")
    new, count = re.subn(VERSION_LINE, lambda m: m.group(1) + version, text, flags=re.MULTILINE)
    if count == 0:
        raise LookupError(f"{VERSION_FILE}: no line matches {VERSION_LINE}")
    path.write_text(new, encoding="utf-8")
    return VERSION_FILE


def repin(verdicts: report.Verdicts, checkout: Path, sglang_dir: Path, pinned_file: Path) -> int:
    """Write the new pins when the report allows it; 0 when written, 1 when refused."""
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        print(
            "--repin: refused: CI is set; moving the pins is a reviewed change, run it by hand",
            file=sys.stderr,
        )
        return 1
    version, rows, tests = verdicts.version, verdicts.rows, verdicts.contract_tests
    if not verdicts.movable:
        why = [f"{r.name} ({r.verdict})" for r in rows if r.verdict == report.PORT]
        why += [f"gdn_contract.{k.name} (fail)" for k in verdicts.links if k.verdict == "fail"]
        if not tests.green:
            why.append(f"{tests.path} ({tests.said})")
        print(f"--repin: refused: not green on {version}: {', '.join(why)}", file=sys.stderr)
        return 1
    written = []
    pins = sources.patch_pins()
    for row in (r for r in rows if r.verdict == report.REPIN):
        module, pinned = pins[row.name]
        path = checkout / (module.replace(".", "/") + ".py")
        text = path.read_text(encoding="utf-8")
        for pin in pinned:
            new = next(
                (
                    c.candidate
                    for c in row.changes
                    if c.unit.selector == pin.qualname and c.kind != sources.UNCHANGED
                ),
                None,
            )
            if new is not None:
                params = new.params or pin.params
                text = rewrite_pin(text, pin.fingerprint, new.fingerprint, params)
                written.append(f"{path.relative_to(checkout)}: {pin.qualname}")
        path.write_text(text, encoding="utf-8")
    written.append(move_version(checkout, version))
    pinned_file.write_text(sources.dump(sources.snapshot(sglang_dir, version)), encoding="utf-8")
    written.append(f"{pinned_file.name} (the pinned sources, from {sglang_dir})")
    print(f"--repin: SGLang {version}: " + "; ".join(written), file=sys.stderr)
    print(
        "--repin: next: make setup (.venv moves to the new release), make test, review git diff",
        file=sys.stderr,
    )
    return 0
