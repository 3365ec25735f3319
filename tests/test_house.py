"""The house's rules, checked against the code: a package that finds no file of the checkout, maps
(docs/architecture.md, the README's layout) that name every room, lazy imports that say why.

Why this exists: a map that lists yesterday's folders sends the newcomer to the wrong room. The
import rules (no circle, nothing of the checkout imported by the package) are import-linter's
contracts in pyproject.toml, run by `make lint`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from qwen_npu.patches.registry import PATCHES
from tools.paths import DOCS, REPO

HOUSE = ("qwen_npu", "tools")


def test_the_package_finds_no_file_by_counting_parent_folders() -> None:
    """What it needs from a checkout, its caller hands it (its imports: `make lint`'s contracts)."""
    offenders = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "qwen_npu").rglob("*.py"))
        if re.search(r"parents\[\d+\]|\.parent\.parent", path.read_text())
    ]
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


def _map_rows() -> list[tuple[str, str]]:
    """(path, description) of every row of docs/architecture.md's map ("## The house")."""
    page = (DOCS / "architecture.md").read_text()
    block = re.search(r"## The house\n+```\n(.*?)```", page, re.S)
    assert block, "docs/architecture.md: no code block under '## The house'"
    rows: list[tuple[str, str]] = []
    for line in block.group(1).splitlines():
        if line[:1].strip():
            path, _, text = line.partition(" ")
            rows.append((path, text))
        elif rows:
            rows[-1] = (rows[-1][0], f"{rows[-1][1]} {line.strip()}")
    return rows


def test_the_architecture_map_names_only_what_exists() -> None:
    """Each row's path exists; a ``name.py``, a ``folder/`` under the house and a module named by
    its ``snake_case`` stem in a row's text exist in that row's folder (a rename moves the map)."""
    missing = []
    for path, text in _map_rows():
        where = REPO / path
        if not where.exists():
            missing.append(path)
            continue
        folder = where if where.is_dir() else where.parent
        names = {p.stem for p in folder.rglob("*") if "__pycache__" not in p.parts}
        for name in re.findall(r"(?<![\w<>/.-])([a-z][a-z0-9_]*)\.py\b", text):
            if name not in names:
                missing.append(f"{path}: {name}.py")
        for name in re.findall(r"(?<![\w/.`-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b(?![./(=`-])", text):
            if name not in names:
                missing.append(f"{path}: {name}")
        for sub in re.findall(r"(?<![\w/.-])((?:qwen_npu|tools|fixtures|tests)/[\w/.]*)", text):
            if not (REPO / sub.rstrip(".")).exists():
                missing.append(f"{path}: {sub}")
    assert missing == []


def test_the_architecture_map_has_a_row_for_every_package_folder() -> None:
    rows = " ".join(f"{path} {text}" for path, text in _map_rows())
    folders = sorted(
        p.parent.relative_to(REPO).as_posix()
        for root in (*HOUSE, "fixtures")
        for p in (REPO / root).rglob("__init__.py")
        if "__pycache__" not in p.parts
    )
    assert [f for f in folders if f"{f}/" not in rows] == []


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
