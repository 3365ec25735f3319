"""Find, read, parse and locate upstream Python source; the drift guard's fingerprint.

Why this exists: the drift guard, the build check, the GDN contract and the kernel-contents check
judge SGLang and sgl-kernel-npu code they cannot import where they run (no NPU at image build,
SGLang's import costs seconds); they share this one way to read it.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import inspect
import json
import os
import sys
import tokenize
from collections.abc import Iterator, Sequence
from pathlib import Path

Function = ast.FunctionDef | ast.AsyncFunctionDef


def find_module(name: str, search: Sequence[str] | None = None) -> Path | None:
    """The ``.py`` file of module ``name`` on ``search`` (default ``sys.path``), found in the
    file system as the path finder does: no ``__init__`` runs, nothing lands in sys.modules."""
    dirs = [Path(d or ".") for d in (sys.path if search is None else search)]
    *packages, leaf = name.split(".")
    for part in packages:
        regular = [d / part for d in dirs if (d / part / "__init__.py").is_file()]
        dirs = regular[:1] or [d / part for d in dirs if (d / part).is_dir()]
        if not dirs:
            return None
    for d in dirs:
        for candidate in (d / leaf / "__init__.py", d / f"{leaf}.py"):
            if candidate.is_file():
                return candidate
    return None


def package_dir(name: str) -> Path | None:
    """The folder of a regular top-level package on sys.path, unimported."""
    path = find_module(name)
    return path.parent if path is not None and path.name == "__init__.py" else None


def read(path: str | os.PathLike[str] | None) -> str | None:
    """A file's text as Python reads it (its encoding cookie); None when it cannot be read."""
    if path is None:
        return None
    try:
        with tokenize.open(path) as handle:
            return handle.read()
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def parse(path: str | os.PathLike[str]) -> ast.Module | str:
    """The module in file ``path``, parsed; or why not, in a few words."""
    text = read(path)
    if text is None:
        return "cannot be read"
    try:
        return ast.parse(text)
    except SyntaxError as exc:
        return f"line {exc.lineno} does not parse: {exc.msg}"


def module_source(obj: object) -> str | None:
    """The source of the module that defines ``obj`` (a function, say); None without one."""
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    try:
        return inspect.getsource(module if module is not None else obj)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None


def names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module's top-level functions by name."""
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def params(func: Function) -> list[str]:
    return [a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)]


def calls(node: ast.AST) -> list[tuple[str, ast.Call]]:
    """Every call under ``node`` as (the callee as written, the call), in line order."""
    found = [(ast.unparse(n.func), n) for n in ast.walk(node) if isinstance(n, ast.Call)]
    return sorted(found, key=lambda item: item[1].lineno)


def module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run at import: the body and its if/else branches, and the body of a
    ``try`` unless it catches ImportError (an optional import, skipped as the module skips it)."""
    optional = {"ImportError", "ModuleNotFoundError", "Exception"}
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from module_level(stmt.body)
            yield from module_level(stmt.orelse)
        elif isinstance(stmt, ast.Try) and not any(
            h.type is None or optional & names(h.type) for h in stmt.handlers
        ):
            yield from module_level(stmt.body)


def defined_names(tree: ast.Module) -> tuple[set[str], bool]:
    """The top-level names a module defines, and whether it may define more (``import *``, a
    module ``__getattr__``)."""
    found: set[str] = set()
    open_ended = False
    for stmt in module_level(tree.body):
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(stmt.name)
            open_ended |= stmt.name == "__getattr__"
        elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            found |= {n for t in targets for n in names(t)}
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            open_ended |= any(a.name == "*" for a in stmt.names)
            found |= {a.asname or a.name.split(".")[0] for a in stmt.names if a.name != "*"}
        elif isinstance(stmt, ast.Try):  # names bound in an optional try are bound too
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.FunctionDef | ast.ClassDef):
                    found.add(sub.name)
                elif isinstance(sub, ast.alias):
                    found.add(sub.asname or sub.name.split(".")[0])
    return found, open_ended


def imported_from(tree: ast.Module, name: str, importer: str) -> str | None:
    """The module ``importer`` takes ``name`` from (``from X import name``, relative or not)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names):
            if node.level == 0:
                return node.module
            base = importer.split(".")[: -node.level]
            return ".".join([*base, node.module] if node.module else base)
    return None


def find_function(tree: ast.AST, qualname: str, first_line: int | None = None) -> Function | None:
    """The ``def`` whose qualified name is ``qualname`` (``Class.method``, ``f.<locals>.g``).
    Where one name is defined more than once (``if``/``else`` variants), ``first_line`` (the code
    object's ``co_firstlineno``) picks the one the running code came from."""
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                if prefix + child.name == qualname:
                    found.append(child)
                visit(child, prefix + child.name + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    if len(found) > 1 and first_line is not None:
        starts = [min([f.lineno, *(d.lineno for d in f.decorator_list)]) for f in found]
        found = [f for f, at in zip(found, starts, strict=True) if at == first_line] or found
    return found[0] if found else None


def _canonical(node: object) -> object:
    """The syntax tree as plain lists, the same on every Python the engine runs (3.10-3.13).

    ``ast.dump`` is not: 3.12 adds ``type_params=[]`` to every function and class, 3.13 stops
    printing empty fields. Here a field that is None or an empty list is left out on every version;
    positions are never included."""
    if isinstance(node, ast.AST):
        fields = []
        for name in node._fields:
            value = getattr(node, name, None)
            if value is not None and value != []:
                fields.append([name, _canonical(value)])
        return [type(node).__name__, fields]
    if isinstance(node, list):
        return [_canonical(item) for item in node]
    return [type(node).__name__, repr(node)]


def tree_fingerprint(node: ast.AST) -> str:
    """sha256 of a function's (or any node's) canonical tree, docstrings left out."""
    tree = copy.deepcopy(node)
    for sub in ast.walk(tree):
        if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = sub.body[0] if sub.body else None
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                sub.body = sub.body[1:] or [ast.Pass()]
    text = json.dumps(_canonical(tree), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def fingerprint_in_source(source: str, qualname: str, first_line: int | None = None) -> str | None:
    """The fingerprint of ``qualname`` as defined in a module's source text (None: not there)."""
    try:
        node = find_function(ast.parse(source), qualname, first_line)
    except SyntaxError:
        return None
    return None if node is None else tree_fingerprint(node)
