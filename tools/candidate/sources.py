"""The SGLang code each patch and GDN contract link depends on, found in files by name with ``ast``.

Why: the report diffs exactly the code our patches pin and our contract checks read; the pinned
release's copy is data (``pinned_sglang.json``), so the diff needs no network nor the old wheel. A
unit is a ``def`` (a patch's ``PINS``), a ``caller`` (the method of a class calling an op, wherever
the call moves) or an ``import`` (each ``from X import Y`` binding a name, with its ``if`` branch).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import hashlib
import importlib
import json
import re
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_npu.patches import core, gdn_contract
from qwen_npu.patches.registry import GDN_CONTRACT, PATCHES
from qwen_npu.upstream import source as upstream

#: The pinned release's sources, beside this module (``make sglang-snapshot`` writes it).
PINNED_FILE = Path(__file__).with_name("pinned_sglang.json")
SNAPSHOT_VERB = "make sglang-snapshot"

DEF, CALLER, IMPORT = "def", "caller", "import"

#: Where the AscendHybridLinearAttnBackend and TritonGDNKernel modules are, inside ``sglang/``.
HYBRID_BACKEND_FILE = "srt/hardware_backend/npu/attention/ascend_hybrid_linear_attn_backend.py"
GDN_TRITON_FILE = "srt/layers/attention/linear/kernels/gdn_triton.py"
MOVER_NAME = "move_intermediate_cache"
#: The name gdn_triton binds the decode kernel to (on NPU: sgl-kernel-npu's DECODE_WRAPPER).
DECODE_NAME = "fused_sigmoid_gating_delta_rule_update"


@dataclass(frozen=True)
class Unit:
    """One piece of SGLang code that a patch or contract link depends on."""

    owner: str  # a patch name, or "gdn_contract.<link>"
    file: str  # relative to the sglang package folder
    kind: str  # DEF, CALLER or IMPORT
    selector: str  # DEF: qualname; CALLER: "Class calls op"; IMPORT: the bound name

    @property
    def label(self) -> str:
        return f"sglang/{self.file}: {self.selector}"


@dataclass(frozen=True)
class Found:
    """A unit as found in one SGLang tree."""

    qualname: str  # the def found (for CALLER, the method holding the call)
    first_line: int
    source: str
    fingerprint: str
    params: tuple[str, ...] | None  # None for IMPORT units
    imports: tuple[tuple[str, str], ...] = ()  # IMPORT units: (module, name) per binding


def module_file(module: str) -> str:
    return module.removeprefix("sglang.").replace(".", "/") + ".py"


def patch_pins() -> dict[str, tuple[str, tuple[core.Pin, ...]]]:
    """patch name -> (its module, its ``PINS``), in registry order (imports no SGLang)."""
    return {
        info.name: (info.module, tuple(importlib.import_module(info.module).PINS))
        for info in PATCHES
    }


def _calls(op: str) -> tuple[tuple[str, str, str], ...]:
    return ((gdn_contract.BACKEND_FILE, CALLER, f"{gdn_contract.BACKEND_CLASS} calls {op}"),)


#: The SGLang code each contract link reads or relies on (the kernels' own files are
#: sgl-kernel-npu's, pinned as SGL_KERNEL_NPU_VERSION, not part of an SGLang release).
CONTRACT_UNITS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "pool_layout": (
        ("srt/mem_cache/memory_pool.py", DEF, "MambaPool.__init__"),
        ("srt/configs/mamba_utils.py", DEF, "Mamba2StateShape.create"),
    ),
    "prefill_op": _calls(gdn_contract.CHUNK_OP),
    "verify_op": _calls(gdn_contract.VERIFY_OP),
    "mover": ((HYBRID_BACKEND_FILE, IMPORT, MOVER_NAME),),
    "decode_kernel": ((GDN_TRITON_FILE, IMPORT, DECODE_NAME),),
    "ssm_dtype": (
        ("srt/configs/mamba_utils.py", DEF, "mamba2_state_dtype"),
        ("srt/arg_groups/serving_hook.py", DEF, "handle_environment_variables"),
    ),
}


def units() -> list[Unit]:
    found = [
        Unit(name, module_file(pin.module), DEF, pin.qualname)
        for name, (_, pins) in patch_pins().items()
        for pin in pins
    ]
    for link in GDN_CONTRACT:
        found += [Unit(f"gdn_contract.{link.name}", *row) for row in CONTRACT_UNITS[link.name]]
    return found


# --- reading one tree ---------------------------------------------------------------------------


def def_params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    """The parameter names in ``inspect.signature`` order."""
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    names += [a.vararg.arg] if a.vararg else []
    names += [p.arg for p in a.kwonlyargs]
    return (*names, a.kwarg.arg) if a.kwarg else tuple(names)


def _segment(lines: Sequence[str], node: ast.stmt) -> tuple[int, str]:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return first, "".join(lines[first - 1 : node.end_lineno or node.lineno])


def _found_def(
    lines: Sequence[str], node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str
) -> Found:
    first, text = _segment(lines, node)
    return Found(qualname, first, text, upstream.tree_fingerprint(node), def_params(node))


def _caller(tree: ast.Module, lines: Sequence[str], selector: str) -> Found | None:
    cls_name, _, op = selector.partition(" calls ")
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef) and cls.name == cls_name:
            for item in cls.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                    isinstance(n, ast.Call) and ast.unparse(n.func) == op for n in ast.walk(item)
                ):
                    return _found_def(lines, item, f"{cls_name}.{item.name}")
    return None


def _imports_under(
    node: ast.AST, conds: tuple[str, ...] = ()
) -> Iterator[tuple[str, ast.ImportFrom]]:
    """Each ``from X import ...`` with the ``if`` conditions it sits under (``is_npu()``,
    ``not (is_cpu())``)."""
    if isinstance(node, ast.ImportFrom):
        yield " and ".join(conds), node
    elif isinstance(node, ast.If):
        test = ast.unparse(node.test)
        for branch in node.body:
            yield from _imports_under(branch, (*conds, test))
        for branch in node.orelse:
            yield from _imports_under(branch, (*conds, f"not ({test})"))
    else:
        for child in ast.iter_child_nodes(node):
            yield from _imports_under(child, conds)


#: The line above each import in the carried text: the branch it is in (no line number, so a
#: statement moving down the file is no difference).
_HEADER = re.compile(r"^# (?:under: (.*)|module level)$")


def _branches(source: str) -> dict[str, str]:
    """An IMPORT unit's carried text per branch: condition -> its import statements."""
    blocks: dict[str, str] = {}
    cond = ""
    for line in source.splitlines(keepends=True):
        header = _HEADER.match(line.rstrip("\n"))
        if header is not None:
            cond = header.group(1) or ""
            blocks.setdefault(cond, "")
        else:
            blocks[cond] = blocks.get(cond, "") + line
    return blocks


def _bindings(node: ast.ImportFrom, name: str) -> list[tuple[str, str]]:
    return [(node.module or "", a.name) for a in node.names if (a.asname or a.name) == name]


def _imports(tree: ast.Module, lines: Sequence[str], name: str) -> Found | None:
    found = sorted(
        ((cond, node) for cond, node in _imports_under(tree) if _bindings(node, name)),
        key=lambda pair: pair[1].lineno,
    )
    text = "".join(
        (f"# under: {cond}\n" if cond else "# module level\n")
        + textwrap.dedent(_segment(lines, node)[1])
        for cond, node in found
    )
    first = found[0][1].lineno if found else 0
    return parsed(Unit("", "", IMPORT, name), text, first, f"import {name}") if found else None


def find(sglang_dir: Path, unit: Unit) -> Found | str:
    """The unit in the tree at ``sglang_dir`` (the ``sglang`` package folder), or why not."""
    where = f"sglang/{unit.file}"
    source = upstream.read(sglang_dir / unit.file)
    if source is None:
        return f"no readable {where}"
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"{where}:{exc.lineno}: does not parse: {exc.msg}"
    lines = source.splitlines(keepends=True)
    if unit.kind == DEF:
        node = upstream.find_function(tree, unit.selector)
        found = None if node is None else _found_def(lines, node, unit.selector)
        return found or f"{where} defines no {unit.selector}"
    if unit.kind == CALLER:
        return _caller(tree, lines, unit.selector) or f"{where}: no method of {unit.selector}"
    return _imports(tree, lines, unit.selector) or f"{where} imports no {unit.selector}"


def parsed(unit: Unit, source: str, first_line: int, qualname: str) -> Found:
    """A unit's text parsed for its fingerprint and parameters (an IMPORT unit's: each branch's
    condition with its statements' fingerprints, and what they bind)."""
    if unit.kind != IMPORT:
        node = ast.parse(textwrap.dedent(source)).body[0]
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        return Found(
            qualname, first_line, source, upstream.tree_fingerprint(node), def_params(node)
        )
    digest, bindings = hashlib.sha256(), []
    for cond, body in _branches(source).items():
        for statement in ast.parse(body).body:
            assert isinstance(statement, ast.ImportFrom)
            digest.update(f"{cond}|{upstream.tree_fingerprint(statement)}|".encode())
            bindings += _bindings(statement, unit.selector)
    return Found(qualname, first_line, source, digest.hexdigest(), None, tuple(bindings))


# --- the pinned release's copy ------------------------------------------------------------------


def snapshot(sglang_dir: Path, version: str) -> dict[str, Any]:
    rows = []
    for unit in units():
        found = find(sglang_dir, unit)
        if isinstance(found, str):
            raise LookupError(f"{unit.label}: {found}")
        carried = {
            "qualname": found.qualname,
            "first_line": found.first_line,
            "source": found.source,
        }
        rows.append(dataclasses.asdict(unit) | carried)
    return {
        "about": (
            f"SGLang {version}'s code that qwen-npu's patches and GDN contract checks depend on, "
            f"written by `{SNAPSHOT_VERB}`; the base of `make sglang-candidate`'s diffs"
        ),
        "sglang_version": version,
        "units": rows,
    }


def dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


@dataclass(frozen=True)
class Pinned:
    version: str
    by_key: dict[Unit, Found]


def load_pinned(path: Path = PINNED_FILE) -> Pinned:
    """The carried copy; ``LookupError`` naming the file and the fix when it is unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        by_key = {}
        for row in data["units"]:
            unit = Unit(row["owner"], row["file"], row["kind"], row["selector"])
            by_key[unit] = parsed(unit, row["source"], int(row["first_line"]), row["qualname"])
        return Pinned(str(data["sglang_version"]), by_key)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LookupError(
            f"{path}: cannot read the pinned sources ({type(exc).__name__}: {exc}); "
            f"regenerate it with `{SNAPSHOT_VERB}` against the pinned SGLang"
        ) from None


# --- comparing ----------------------------------------------------------------------------------

UNCHANGED, COSMETIC, SIGNATURE = "unchanged", "comments-only", "signature"
BODY, MISSING, MOVED = "body", "missing", "moved"


@dataclass(frozen=True)
class Change:
    unit: Unit
    kind: str  # UNCHANGED, COSMETIC, SIGNATURE, BODY, MISSING, MOVED
    pinned: Found | None
    candidate: Found | None
    why: str  # MISSING: what was not found
    diff: str

    @property
    def summary(self) -> str:
        """One line, said from the diff (never a difference the diff does not show)."""
        old, new, lines = self.pinned, self.candidate, self.diff.splitlines()
        if old is None or new is None or self.kind in (UNCHANGED, MISSING):
            return f"{self.unit.label}: {self.why or self.kind}"
        added = sum(1 for s in lines if s.startswith("+") and not s.startswith("+++"))
        removed = sum(1 for s in lines if s.startswith("-") and not s.startswith("---"))
        counted = f"+{added} -{removed} lines"
        said = {
            COSMETIC: f"{counted}, comments, docstrings or layout only (same fingerprint)",
            SIGNATURE: f"parameters {old.params} -> {new.params}, {counted}",
            MOVED: f"now in {new.qualname} (was {old.qualname}), {counted}",
        }.get(self.kind, f"code changed, {counted}")
        if self.kind == BODY and self.unit.kind == IMPORT:
            was, now = _branches(old.source), _branches(new.source)
            moved = [
                c or "module level"
                for c in sorted(set(was) | set(now), key=str)
                if was.get(c) != now.get(c)
            ]
            said = f"the import under {', '.join(moved)} changed, {counted}"
        return f"{self.unit.label}: {said}"


def unified(unit: Unit, pinned: Found | None, candidate: Found | None, old: str, new: str) -> str:
    def side(version: str, found: Found | None) -> tuple[list[str], str]:
        where = f":{found.first_line} {found.qualname}" if found else ""
        text = found.source.splitlines(keepends=True) if found else []
        return text, f"sglang {version} sglang/{unit.file}{where}"

    (a, a_name), (b, b_name) = side(old, pinned), side(new, candidate)
    text = "".join(difflib.unified_diff(a, b, a_name, b_name))
    return text if text.endswith("\n") or not text else text + "\n"


def compare(
    pinned: Pinned, sglang_dir: Path, new_version: str, only: Iterable[Unit] | None = None
) -> list[Change]:
    changes = []
    for unit in only if only is not None else units():
        old, found = pinned.by_key.get(unit), find(sglang_dir, unit)
        new = None if isinstance(found, str) else found
        if old is None:
            why = f"not in {PINNED_FILE.name}: run `{SNAPSHOT_VERB}`"
            changes.append(Change(unit, MISSING, None, new, why, ""))
            continue
        diff = unified(unit, old, new, pinned.version, new_version)
        if isinstance(found, str):
            kind, why = MISSING, found
        elif old.qualname != found.qualname:
            kind, why = MOVED, ""
        elif old.source == found.source:
            kind, why = UNCHANGED, ""
        elif old.fingerprint == found.fingerprint:
            kind, why = COSMETIC, ""
        else:
            kind, why = (SIGNATURE if old.params != found.params else BODY), ""
        changes.append(Change(unit, kind, old, new, why, diff))
    return changes
