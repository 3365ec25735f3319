"""The SGLang code each patch and GDN contract link depends on, read from files by name.

Why this exists: to tell what a new SGLang release changes for us, the report diffs exactly the
code our patches pin and our contract checks read, between the pinned release and the candidate.
The pinned release's copy is data in the repository (``pinned_sglang.json``: the source text,
docstrings and comments included, written by ``snapshot`` from an installed SGLang), so the diff
needs neither network nor the old wheel. Nothing here imports SGLang: units are found in the files
with ``ast``.

A unit is one of:

- ``def``: a function or method by qualified name (``Class.method``), the patches' ``PINS``;
- ``caller``: the method of a class that calls a given op (``AscendGDNAttnBackend`` calling
  ``torch.ops.npu.chunk_gated_delta_rule``), so a call that moves to another method is still found;
- ``import``: every ``from X import Y`` that binds a name in a module (where SGLang gets the
  sgl-kernel-npu mover and decode kernel from).

Fingerprints are ``core.tree_fingerprint`` of the def (docstrings left out), the drift guard's own;
parameter names are read from the def (what ``inspect.signature`` lists for a plain def).
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import importlib
import json
import re
import textwrap
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_npu.patches import core, gdn_contract
from qwen_npu.patches.registry import GDN_CONTRACT, PATCHES

#: The pinned release's sources, beside this module (``make sglang-snapshot`` writes it).
PINNED_FILE = Path(__file__).with_name("pinned_sglang.json")
#: The same file's place in a checkout (``--checkout`` may name another one than this package's).
PINNED_IN_CHECKOUT = "tools/candidate/pinned_sglang.json"
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
    def key(self) -> str:
        return f"{self.owner}|{self.file}|{self.kind}|{self.selector}"

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

    def as_dict(self) -> dict[str, Any]:
        return {"qualname": self.qualname, "first_line": self.first_line, "source": self.source}


def module_file(module: str) -> str:
    """``sglang.srt.models.qwen3_5_mtp`` -> ``srt/models/qwen3_5_mtp.py``."""
    return module.removeprefix("sglang.").replace(".", "/") + ".py"


def patch_pins() -> dict[str, tuple[str, tuple[core.Pin, ...]]]:
    """patch name -> (its module, its ``PINS``), in registry order (imports no SGLang)."""
    return {
        info.name: (info.module, tuple(importlib.import_module(info.module).PINS))
        for info in PATCHES
    }


#: The SGLang code each contract link reads or relies on (the kernels' own files are
#: sgl-kernel-npu's, pinned as SGL_KERNEL_NPU_VERSION, not part of an SGLang release).
CONTRACT_UNITS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "pool_layout": (
        ("srt/mem_cache/memory_pool.py", DEF, "MambaPool.__init__"),
        ("srt/configs/mamba_utils.py", DEF, "Mamba2StateShape.create"),
    ),
    "prefill_op": (
        (
            gdn_contract.BACKEND_FILE,
            CALLER,
            f"{gdn_contract.BACKEND_CLASS} calls {gdn_contract.CHUNK_OP}",
        ),
    ),
    "verify_op": (
        (
            gdn_contract.BACKEND_FILE,
            CALLER,
            f"{gdn_contract.BACKEND_CLASS} calls {gdn_contract.VERIFY_OP}",
        ),
    ),
    "mover": ((HYBRID_BACKEND_FILE, IMPORT, MOVER_NAME),),
    "decode_kernel": ((GDN_TRITON_FILE, IMPORT, DECODE_NAME),),
    "ssm_dtype": (
        ("srt/configs/mamba_utils.py", DEF, "mamba2_state_dtype"),
        ("srt/arg_groups/serving_hook.py", DEF, "handle_environment_variables"),
    ),
}


def units() -> list[Unit]:
    """Every unit, patches first (registry order, then their pins), then the contract links."""
    found = [
        Unit(name, module_file(pin.module), DEF, pin.qualname)
        for name, (_, pins) in patch_pins().items()
        for pin in pins
    ]
    for link in GDN_CONTRACT:
        found += [
            Unit(f"gdn_contract.{link.name}", file, kind, selector)
            for file, kind, selector in CONTRACT_UNITS[link.name]
        ]
    return found


# --- reading one tree ---------------------------------------------------------------------------


def read_source(path: Path) -> str | None:
    try:
        with tokenize.open(path) as handle:
            return handle.read()
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def def_params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    """The parameter names in ``inspect.signature`` order."""
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    if a.vararg is not None:
        names.append(a.vararg.arg)
    names += [p.arg for p in a.kwonlyargs]
    if a.kwarg is not None:
        names.append(a.kwarg.arg)
    return tuple(names)


def _segment(lines: Sequence[str], node: ast.stmt) -> tuple[int, str]:
    decorators = getattr(node, "decorator_list", [])
    first = min([node.lineno, *(d.lineno for d in decorators)])
    end = node.end_lineno or node.lineno
    return first, "".join(lines[first - 1 : end])


def _found_def(
    lines: Sequence[str], node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str
) -> Found:
    first, text = _segment(lines, node)
    return Found(qualname, first, text, core.tree_fingerprint(node), def_params(node))


def _caller(tree: ast.Module, lines: Sequence[str], selector: str) -> Found | None:
    cls_name, _, op = selector.partition(" calls ")
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name), None)
    if cls is None:
        return None
    for item in cls.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            isinstance(n, ast.Call) and ast.unparse(n.func) == op for n in ast.walk(item)
        ):
            return _found_def(lines, item, f"{cls_name}.{item.name}")
    return None


def _conditions(tree: ast.Module) -> dict[int, str]:
    """id(ImportFrom) -> the ``if`` conditions it sits under (``is_npu()``, ``not (is_cpu())``)."""
    under: dict[int, str] = {}

    def visit(node: ast.AST, conds: tuple[str, ...]) -> None:
        if isinstance(node, ast.ImportFrom):
            under[id(node)] = " and ".join(conds)
            return
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            for branch in node.body:
                visit(branch, (*conds, test))
            for branch in node.orelse:
                visit(branch, (*conds, f"not ({test})"))
            return
        for child in ast.iter_child_nodes(node):
            visit(child, conds)

    visit(tree, ())
    return under


_HEADER = re.compile(r"^# (?:under: (.*)|module level)$")


def _import_header(cond: str) -> str:
    """The line above each import in the carried text: the branch it is in (no line number, so a
    statement moving down the file is no difference)."""
    return (f"# under: {cond}" if cond else "# module level") + "\n"


def _bindings(node: ast.ImportFrom, name: str) -> list[tuple[str, str]]:
    return [(node.module or "", a.name) for a in node.names if (a.asname or a.name) == name]


def _imports(tree: ast.Module, lines: Sequence[str], name: str) -> Found | None:
    conditions = _conditions(tree)
    nodes = sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and _bindings(n, name)),
        key=lambda n: n.lineno,
    )
    if not nodes:
        return None
    texts, bindings, digest = [], [], hashlib.sha256()
    for node in nodes:
        cond = conditions.get(id(node), "")
        texts.append(_import_header(cond) + textwrap.dedent(_segment(lines, node)[1]))
        digest.update(f"{cond}|{core.tree_fingerprint(node)}|".encode())
        bindings += _bindings(node, name)
    return Found(
        f"import {name}", nodes[0].lineno, "".join(texts), digest.hexdigest(), None, tuple(bindings)
    )


def find(sglang_dir: Path, unit: Unit) -> Found | str:
    """The unit in the SGLang tree at ``sglang_dir`` (the ``sglang`` package folder), or why not."""
    path = sglang_dir / unit.file
    source = read_source(path)
    if source is None:
        return f"no readable sglang/{unit.file}"
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"sglang/{unit.file}:{exc.lineno}: does not parse: {exc.msg}"
    lines = source.splitlines(keepends=True)
    if unit.kind == DEF:
        node = core.find_function(tree, unit.selector)
        return (
            _found_def(lines, node, unit.selector)
            if node is not None
            else f"sglang/{unit.file} defines no {unit.selector}"
        )
    if unit.kind == CALLER:
        found = _caller(tree, lines, unit.selector)
        return found or f"sglang/{unit.file}: no method of {unit.selector}"
    found = _imports(tree, lines, unit.selector)
    return found or f"sglang/{unit.file} imports no {unit.selector}"


# --- the pinned release's copy ------------------------------------------------------------------


def snapshot(sglang_dir: Path, version: str) -> dict[str, Any]:
    """Every unit's source in the tree at ``sglang_dir``: what ``pinned_sglang.json`` holds."""
    rows = []
    for unit in units():
        found = find(sglang_dir, unit)
        if isinstance(found, str):
            raise LookupError(f"{unit.label}: {found}")
        rows.append({"owner": unit.owner, "file": unit.file, "kind": unit.kind,
                     "selector": unit.selector, **found.as_dict()})  # fmt: skip
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
    by_key: dict[str, Found]


def load_pinned(path: Path = PINNED_FILE) -> Pinned:
    """The carried copy; ``LookupError`` naming the file and the fix when it is unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        version = str(data["sglang_version"])
        rows = list(data["units"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LookupError(
            f"{path}: cannot read the pinned sources ({type(exc).__name__}: {exc}); "
            f"regenerate it with `{SNAPSHOT_VERB}` against the pinned SGLang"
        ) from None
    by_key: dict[str, Found] = {}
    for row in rows:
        unit = Unit(row["owner"], row["file"], row["kind"], row["selector"])
        by_key[unit.key] = parsed(unit, row["source"], int(row["first_line"]), row["qualname"])
    return Pinned(version, by_key)


def parsed(unit: Unit, source: str, first_line: int, qualname: str) -> Found:
    """A carried unit's source, parsed again for its fingerprint and parameters."""
    if unit.kind == IMPORT:
        digest, bindings = hashlib.sha256(), []
        blocks: list[tuple[str, list[str]]] = []
        for line in source.splitlines(keepends=True):
            header = _HEADER.match(line.rstrip("\n"))
            if header is not None:
                blocks.append((header.group(1) or "", []))
            elif blocks:
                blocks[-1][1].append(line)
        for cond, body in blocks:
            for node in ast.parse("".join(body)).body:
                assert isinstance(node, ast.ImportFrom)
                digest.update(f"{cond}|{core.tree_fingerprint(node)}|".encode())
                bindings += _bindings(node, unit.selector)
        return Found(qualname, first_line, source, digest.hexdigest(), None, tuple(bindings))
    node = ast.parse(textwrap.dedent(source)).body[0]
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    return Found(qualname, first_line, source, core.tree_fingerprint(node), def_params(node))


# --- comparing ----------------------------------------------------------------------------------

UNCHANGED, COSMETIC, SIGNATURE, BODY, MISSING, MOVED = (
    "unchanged",
    "comments-only",
    "signature",
    "body",
    "missing",
    "moved",
)


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
        if self.kind == UNCHANGED:
            return f"{self.unit.label}: unchanged"
        if self.kind == MISSING:
            return f"{self.unit.label}: {self.why}"
        added, removed = _counts(self.diff)
        counted = f"+{added} -{removed} lines"
        assert self.pinned is not None and self.candidate is not None
        if self.kind == COSMETIC:
            return (
                f"{self.unit.label}: {counted}, comments, docstrings or layout only "
                "(same fingerprint)"
            )
        if self.kind == SIGNATURE:
            return (
                f"{self.unit.label}: parameters {self.pinned.params} -> {self.candidate.params}, "
                f"{counted}"
            )
        if self.kind == MOVED:
            return (
                f"{self.unit.label}: now in {self.candidate.qualname} "
                f"(was {self.pinned.qualname}), {counted}"
            )
        if self.unit.kind == IMPORT:
            old, new = _branches(self.pinned.source), _branches(self.candidate.source)
            moved = [c or "module level" for c in sorted(set(old) | set(new), key=str)
                     if old.get(c) != new.get(c)]  # fmt: skip
            return f"{self.unit.label}: the import under {', '.join(moved)} changed, {counted}"
        return f"{self.unit.label}: code changed, {counted}"


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


def _counts(diff: str) -> tuple[int, int]:
    lines = diff.splitlines()
    added = sum(1 for s in lines if s.startswith("+") and not s.startswith("+++"))
    removed = sum(1 for s in lines if s.startswith("-") and not s.startswith("---"))
    return added, removed


def unified(unit: Unit, pinned: Found | None, candidate: Found | None, old: str, new: str) -> str:
    a = pinned.source.splitlines(keepends=True) if pinned else []
    b = candidate.source.splitlines(keepends=True) if candidate else []

    def name(version: str, found: Found | None) -> str:
        where = f":{found.first_line} {found.qualname}" if found else ""
        return f"sglang {version} sglang/{unit.file}{where}"

    text = "".join(difflib.unified_diff(a, b, name(old, pinned), name(new, candidate)))
    return text if text.endswith("\n") or not text else text + "\n"


def compare(
    pinned: Pinned, sglang_dir: Path, new_version: str, only: Iterable[Unit] | None = None
) -> list[Change]:
    """Each unit, the carried copy against the tree at ``sglang_dir``."""
    changes = []
    for unit in only if only is not None else units():
        old = pinned.by_key.get(unit.key)
        found = find(sglang_dir, unit)
        if old is None:
            changes.append(
                Change(unit, MISSING, None, None if isinstance(found, str) else found,
                       f"not in {PINNED_FILE.name}: run `{SNAPSHOT_VERB}`", "")
            )  # fmt: skip
            continue
        if isinstance(found, str):
            diff = unified(unit, old, None, pinned.version, new_version)
            changes.append(Change(unit, MISSING, old, None, found, diff))
            continue
        diff = unified(unit, old, found, pinned.version, new_version)
        if old.source == found.source and old.qualname == found.qualname:
            kind = UNCHANGED
        elif old.qualname != found.qualname:
            kind = MOVED
        elif old.fingerprint == found.fingerprint:
            kind = COSMETIC
        elif old.params != found.params:
            kind = SIGNATURE
        else:
            kind = BODY
        changes.append(Change(unit, kind, old, found, "", diff))
    return changes
