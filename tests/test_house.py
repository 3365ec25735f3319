"""The house's rules, checked against the code: no import circle, a package that stands alone,
and maps (docs/architecture.md, the README's layout) that name every room.

Why this exists: a circle or a reach from the installed package back into the checkout is easy to
add and invisible until a wheel or a newcomer trips on it; a map that lists yesterday's folders
sends the newcomer to the wrong room. The import graph is read from the source (``ast``), every
import counted wherever it stands (a lazy import still ties two modules together).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwen_npu.patches.registry import PATCHES
from tools.paths import DOCS, REPO

HOUSE = ("qwen_npu", "tools")


def _modules(roots: tuple[str, ...] = HOUSE) -> dict[str, Path]:
    found = {}
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path) -> Iterator[str]:
    """Every module name an import in ``path`` names (``from pkg import sub`` names pkg.sub)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            yield from (f"{base}.{alias.name}" for alias in node.names)
            yield base


def import_graph(roots: tuple[str, ...] = HOUSE) -> dict[str, set[str]]:
    """module -> the house's modules it imports (the nearest enclosing module of each name)."""
    modules = _modules(roots)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for name in _imported(module, path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                graph[module].add(name)
    # `from pkg import sub` also named `pkg`; an __init__ that only re-exports is no circle
    for module in graph:
        subs = {t for t in graph[module] if any(o.startswith(t + ".") for o in graph[module])}
        graph[module] -= subs
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_house_has_no_import_circle() -> None:
    assert circles(import_graph()) == []


def test_should_find_a_circle_when_two_modules_import_each_other() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


def test_the_package_imports_nothing_of_the_checkout() -> None:
    offenders = []
    for module, path in _modules(("qwen_npu",)).items():
        text = path.read_text()
        names = set(_imported(module, path))
        reach = sorted(n for n in names if n.split(".")[0] in {"tools", "tests", "fixtures"})
        if reach:
            offenders.append(f"{module} imports {reach}")
        if re.search(r"parents\[\d+\]|\.parent\.parent", text):
            offenders.append(f"{module} finds files by counting parent folders")
    assert offenders == []


def _rooms() -> list[str]:
    """Every folder of the house that holds Python, as ``qwen_npu/sim`` (no caches, no data)."""
    rooms = set()
    for root in HOUSE:
        for path in (REPO / root).rglob("*.py"):
            folder = path.parent.relative_to(REPO)
            if "__pycache__" not in folder.parts:
                rooms.add(folder.as_posix())
    return sorted(rooms - set(HOUSE))


@pytest.mark.parametrize("room", _rooms())
def test_the_architecture_page_names_every_room(room: str) -> None:
    page = (DOCS / "architecture.md").read_text()
    assert re.search(rf"(?<![\w/]){re.escape(room)}/", page), f"docs/architecture.md: no {room}/"


def test_the_architecture_page_names_every_patch() -> None:
    page = (DOCS / "architecture.md").read_text()
    assert [p.name for p in PATCHES if p.name not in page] == []


def _readme_layout() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"## Layout\n+```\n(.*?)```", text, re.S)
    assert block, "README.md: no '## Layout' code block"
    return [m.group(1) for m in re.finditer(r"^(\S+/)", block.group(1), re.M)]


def test_the_readme_layout_names_every_package_room_and_only_real_ones() -> None:
    listed = _readme_layout()
    assert [f for f in listed if not (REPO / f).is_dir()] == [], "README layout: no such folder"
    top = sorted(
        f"qwen_npu/{p.name}/"
        for p in (REPO / "qwen_npu").iterdir()
        if p.is_dir() and (p / "__init__.py").is_file()
    )
    assert [room for room in top if room not in listed] == []


def lazy_imports_without_a_reason(path: Path) -> list[int]:
    """Lines of imports inside a function or class of ``path`` with no comment saying why: on the
    line, above it, above the run of imports it belongs to, or on the ``try:`` that holds it."""
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    top = {id(node) for node in tree.body}
    for node in tree.body:  # `if TYPE_CHECKING:` and `try: import x` at module level are top
        if isinstance(node, ast.If | ast.Try):
            top |= {id(inner) for inner in ast.walk(node)}
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    missing = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or id(node) in top:
            continue
        row = node.lineno - 1
        while row > 0 and (
            lines[row - 1].strip().startswith(("import ", "from ", ")"))
            or lines[row - 1].strip() == ""
            or (lines[row - 1].startswith(" " * 8) and lines[row - 1].strip().endswith(","))
        ):
            row -= 1
        above = lines[row - 1].strip() if row > 0 else ""
        parent = parents.get(id(node))
        on_try = isinstance(parent, ast.Try) and "#" in lines[parent.lineno - 1]
        if "#" not in lines[node.lineno - 1] and not above.startswith("#") and not on_try:
            missing.append(node.lineno)
    return missing


def test_a_lazy_import_says_why_beside_it() -> None:
    found = {
        str(path.relative_to(REPO)): rows
        for root in (*HOUSE, "fixtures")
        for path in sorted((REPO / root).rglob("*.py"))
        if (rows := lazy_imports_without_a_reason(path))
    }
    assert found == {}, "imports inside functions without a `# lazy: why` beside them"


def test_should_find_a_lazy_import_without_a_reason(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\n\n\ndef f():\n    import json\n\n    # lazy: an extra's\n"
        "    import yaml\n    from x import (\n        a,\n    )\n    import z\n"
    )
    assert lazy_imports_without_a_reason(module) == [5]
