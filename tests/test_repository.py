"""Repository rules that a reviewer would otherwise check by hand.

The README's first commands, CI calling the same test command, module docstrings, nothing reading
../shared at run time, the tests mirroring the package. ruff and mypy are `make lint`, which
`make test` runs first (Makefile).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "qwen_npu"


def _python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_readme_opens_with_demo_and_test_commands() -> None:
    text = (REPO / "README.md").read_text()
    first_block = re.search(r"```(?:bash|sh)?\n(.*?)```", text, re.S)
    assert first_block, "README.md must open with a code block of commands"
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands[:2] == ["make demo", "make test"]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^make test\b", ci, re.M)


def test_every_module_says_why_it_exists() -> None:
    missing = [
        str(path.relative_to(REPO))
        for path in _python_files(PACKAGE)
        if path.stat().st_size > 0 and ast.get_docstring(ast.parse(path.read_text())) is None
    ]
    assert missing == [], f"modules without a docstring: {missing}"


def test_nothing_reads_the_shared_folder() -> None:
    offenders = []
    for root in (PACKAGE, REPO / "tests", REPO / "mk", REPO / "docker", REPO / "helm"):
        for path in root.rglob("*"):
            if path.is_file() and path.suffix in {".py", ".mk", ".sh", ".yaml", ".tpl", ""}:
                if path == Path(__file__):
                    continue
                text = path.read_text(errors="ignore")
                if "../shared" in text or "/work/shared" in text:
                    offenders.append(str(path.relative_to(REPO)))
    for name in ("Makefile", ".ci/run"):
        if "shared/" in (REPO / name).read_text():
            offenders.append(name)
    assert offenders == []


def test_tests_mirror_the_package_folder_for_folder() -> None:
    """Each part of qwen_npu/ has its tests under the same path in tests/ (issue 13's layout).

    Folders inside a part that only split its modules (routes/, profiles/) are tested by the part's
    own test folder.
    """
    inner = {"routes", "profiles"}
    parts = [
        d.relative_to(PACKAGE)
        for d in sorted(PACKAGE.rglob("*"))
        if d.is_dir() and d.name != "__pycache__" and not inner & set(d.relative_to(PACKAGE).parts)
    ]
    missing = [str(p) for p in parts if not (REPO / "tests" / p).is_dir()]
    assert parts and missing == [], f"qwen_npu/<part> without tests/<part>: {missing}"


def test_make_reaches_the_package_through_its_verbs() -> None:
    """A make target runs ``$(BIN)/qwen-npu VERB`` where a verb exists, not ``python -m qwen_npu``
    or a module's main: one way in, the one users type. The on-call switches are the exception
    (mk/oncall.mk: ``python3 -m qwen_npu oncall``, standard library only, so they run on a machine
    without .venv), and a module without a verb (the demo) is reached as a module."""
    from qwen_npu.cli import VERBS

    found = []
    for mk in sorted((REPO / "mk").glob("*.mk")):
        for n, line in enumerate(mk.read_text().splitlines(), 1):
            for module in re.findall(r"-m (qwen_npu[\w.]*)", line):
                verb = next((v for v, (m, _) in VERBS.items() if m == module), None)
                if module == "qwen_npu" or module == "qwen_npu.cli" or verb is not None:
                    found.append(f"{mk.name}:{n}: {line.strip()}")
    assert [f for f in found if "qwen_npu oncall" not in f] == []
    assert any("qwen_npu oncall" in f for f in found)  # the exception is still there
