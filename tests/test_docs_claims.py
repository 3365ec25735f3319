"""The claims a reader acts on in README.md and docs/*.md hold against the code.

A reader copies a path, a module, a `qwen-npu <verb>` or a `make <target>` out of a page and runs
it, or trusts a count ("15 alerts"). Each kind is derived from the code at test time, never from a
list kept here: paths from the tree, modules and their names from the source, verbs from
``qwen_npu.cli.VERBS``, make targets from make's own database of the Makefile, counts from the
generated alert rules, the dashboards folder, the patch registry and the chart's scenarios.

Paths, modules, verbs and targets are read from code (inline `code` and fenced blocks), where a
reader copies from; counts from the prose. A count of a subset says whose it is ("the draft's two
patches") and is not a claim about the whole.
"""

from __future__ import annotations

import ast
import itertools
import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from qwen_npu.cli import VERBS
from qwen_npu.patches.registry import PATCHES
from tools import chart as chart_tool
from tools.paths import CHART_DIR

CHART = CHART_DIR
PAGES = sorted([REPO / "README.md", CHART / "README.md", *(REPO / "docs").glob("*.md")])

_WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
NUMBERS = {word: n for n, word in enumerate((_WORDS + " fifteen sixteen seventeen").split(" "))}


def _code(text: str) -> Iterator[tuple[int, str]]:
    """(line number, code) of every fenced block line and inline code span of a page."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            yield number, line
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield number, span


def _claims(pattern: str) -> Iterator[tuple[str, str]]:
    """(where, match) of `pattern`'s first group in the code of every page."""
    for page in PAGES:
        for number, code in _code(page.read_text()):
            for match in re.finditer(pattern, code):
                yield f"{page.relative_to(REPO)}:{number}", match.group(1)


# --- paths ---------------------------------------------------------------------------------------


@cache
def _tracked_roots() -> frozenset[str]:
    """The repository's top-level names (what a fresh clone has; out/ and .venv/ are made)."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return frozenset(line.split("/", 1)[0] for line in listed.splitlines())


def _expand(path: str) -> list[str]:
    """`a/{b,c}/<part>.md` -> the globs `a/b/*.md`, `a/c/*.md`."""
    path = re.sub(r"<[^>]*>", "*", path)
    parts = re.split(r"\{([^{}]*)\}", path)
    fixed, choices = parts[0::2], [p.split(",") for p in parts[1::2]]
    out = []
    for picked in itertools.product(*choices):
        out.append("".join(f + c for f, c in itertools.zip_longest(fixed, picked, fillvalue="")))
    return out


def _exists(path: str) -> bool:
    """Whether a path named in a page exists in the repository or, chart-relative, in the chart."""
    bases = [REPO] if path.split("/", 1)[0] in _tracked_roots() else [CHART]
    return all(
        any(base.glob(g) if "*" in g else (base / g).exists() for base in bases)
        for g in _expand(path)
    )


PATH = r"(?<![\w./<>{}*:@-])((?:\.?[\w.-]+|<[\w-]+>)(?:/(?:[\w.*,{}-]|<[\w-]+>)*)+)"


def _named_paths() -> list[tuple[str, str]]:
    chart_roots = {p.name for p in CHART.iterdir()}
    found = []
    for where, raw in _claims(PATH):
        path = re.sub(r"(::\S*|:\d+(?:-\d+)?)$", "", raw).rstrip(".,;)")
        first = path.split("/", 1)[0]
        if "..." in path or first not in _tracked_roots() | chart_roots:
            continue  # not a repository path (an upstream file, a URL, an image reference)
        found.append((where, path))
    return found


def test_every_path_a_page_names_exists() -> None:
    named = _named_paths()
    assert len(named) > 50, "the scan finds the pages' paths"
    missing = [f"{where}: {path}" for where, path in named if not _exists(path)]
    assert missing == [], "pages name paths that do not exist:\n" + "\n".join(missing)


def test_should_find_a_moved_path_when_a_page_names_it() -> None:
    """The check really looks: a folder that moved is reported, a glob and a placeholder are not."""
    assert not _exists("tests/serve/observability")
    assert _exists("tests/observability")
    assert _exists("helm/qwen-npu/profiles/*.yaml")
    assert _exists("tests/{sidecar,sim,observability}")
    assert not _exists("tests/{sidecar,nowhere}")
    assert _exists("templates/_pod.tpl")


# --- modules -------------------------------------------------------------------------------------


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _module_problem(dotted: str) -> str | None:
    """None when `pkg.module[.name]` is a module of the tree (and `name` is defined in it)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:cut])
        source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if base.is_dir() and not source.exists() and cut == len(parts):
            return None  # a namespace folder (tests/...)
        if source.exists():
            rest = parts[cut:]
            if not rest or rest[0] in _top_level_names(source):
                return None
            return f"{source.relative_to(REPO)} defines no {rest[0]!r}"
    return "no such module"


def test_every_module_a_page_names_exists() -> None:
    # `qwen_npu.sidecar level=...` is a log line's logger name (qwen_npu/log.py), not a module.
    named = list(_claims(r"(?<![\w./-])((?:qwen_npu|tools|tests)(?:\.\w+)+)(?!\w| level=)"))
    assert len(named) > 10, "the scan finds the pages' modules"
    wrong = [f"{where}: {name}: {p}" for where, name in named if (p := _module_problem(name))]
    assert wrong == [], "pages name modules or names that do not exist:\n" + "\n".join(wrong)


def test_should_report_a_module_that_moved() -> None:
    assert _module_problem("qwen_npu.testing.processes") is not None
    assert _module_problem("tests.nowhere") == "no such module"
    assert _module_problem("qwen_npu.processes.wait_until") is None
    assert "defines no 'nothing'" in str(_module_problem("qwen_npu.processes.nothing"))


# --- verbs and make targets ----------------------------------------------------------------------


# `qwen-npu <verb>` where a command starts: a code span or line, after a prompt, a pipe, `--`, `&&`
# or an image reference (`docker run ... engine:0.1.0 qwen-npu patches list`); not `the qwen-npu
# values` in a message or `helm install qwen-npu helm/qwen-npu`.
VERB = r"(?:^|[$|;&(]\s*|--\s+|\S+:\S+\s+)qwen-npu ([a-z][a-z0-9-]*)(?![\w/.:=-])"


def test_every_verb_a_page_runs_is_registered() -> None:
    used = list(_claims(VERB))
    assert len(used) > 10, "the scan finds the pages' commands"
    unknown = [f"{where}: qwen-npu {verb}" for where, verb in used if verb not in VERBS]
    assert unknown == [], "pages run verbs the CLI does not have:\n" + "\n".join(unknown)


@cache
def _make_targets() -> tuple[set[str], list[re.Pattern[str]]]:
    """Every target make itself knows (its database, `make -pRrq`): names, and pattern rules
    (`perf-%`) as regexes. Files make only mentions ("# Not a target") are left out."""
    database = subprocess.run(
        ["make", "-pRrq", "-f", "Makefile", ":"], cwd=REPO, capture_output=True, text=True
    ).stdout
    files = database.split("\n# Files\n", 1)[1].split("\n# Finished Make data base", 1)[0]
    names: set[str] = set()
    patterns: list[re.Pattern[str]] = []
    previous = ""
    for line in files.splitlines():
        head = re.match(r"([^#\s][^:]*?):(?!=)", line)
        if head and previous != "# Not a target:" and not head.group(1).startswith("."):
            for target in head.group(1).split():
                if "%" in target:
                    patterns.append(re.compile(re.escape(target).replace("%", r"[\w-]+")))
                else:
                    names.add(target)
        previous = line
    return names, patterns


def _is_target(target: str) -> bool:
    names, patterns = _make_targets()
    if "<" in target:  # `make perf-<part>`: some target fits the placeholder
        shape = re.compile(re.sub(r"<[^>]*>", r"[\\w-]+", target))
        return any(shape.fullmatch(n) for n in names) or any(
            shape.pattern in p.pattern for p in patterns
        )
    return target in names or any(p.fullmatch(target) for p in patterns)


def test_every_make_target_a_page_runs_exists() -> None:
    used = list(_claims(r"(?<![\w./-])make ([a-z][\w-]*(?:<[\w-]+>[\w-]*)?)"))
    assert len(used) > 20, "the scan finds the pages' make commands"
    unknown = [f"{where}: make {target}" for where, target in used if not _is_target(target)]
    assert unknown == [], "pages run make targets that do not exist:\n" + "\n".join(unknown)


def test_should_know_the_make_targets_and_verbs_it_checks_against() -> None:
    assert {"test", "test-fast", "demo", "bench", "chart"} <= _make_targets()[0]
    assert _is_target("perf-sim") and not _is_target("perf-nothing-at-all")
    assert not _is_target("no-such-target")
    assert "preflight" in VERBS and "sidecar" in VERBS


# --- counts --------------------------------------------------------------------------------------


def _alerts() -> int:
    rules = yaml.safe_load((CHART / "files/rules/qwen-npu-alerts.yaml").read_text())
    groups = rules.get("groups", rules) if isinstance(rules, dict) else rules
    return sum("alert" in rule for group in groups for rule in group["rules"])


TRUTH = {
    "alerts": _alerts,
    "dashboards": lambda: len(list((CHART / "files/dashboards").glob("*.json"))),
    "patches": lambda: len(PATCHES),
    "renders": lambda: len(chart_tool.scenarios()),
}
COUNT = re.compile(
    r"(?<!['’]s )\b(\d+|" + "|".join(NUMBERS) + r")\s+(?:(?:Prometheus|Grafana|runtime)\s+)?"
    r"(" + "|".join(TRUTH) + r")\b",
    re.I,
)


@pytest.mark.parametrize("noun", list(TRUTH))
def test_every_count_a_page_states_is_the_code_s(noun: str) -> None:
    truth = TRUTH[noun]()
    stated = [
        (f"{page.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}", m.group(0))
        for page in PAGES
        for text in [page.read_text()]
        for m in COUNT.finditer(text)
        if m.group(2).lower() == noun
    ]
    wrong = [
        f"{where}: {said!r} (the code has {truth})"
        for where, said in stated
        if int(NUMBERS.get(said.split()[0].lower(), said.split()[0])) != truth
    ]
    assert wrong == [], f"pages count {noun} wrongly:\n" + "\n".join(wrong)


def test_should_read_a_count_in_words_or_digits_and_skip_a_possessive_subset() -> None:
    found = [m.group(0) for m in COUNT.finditer("thirteen Prometheus alerts, 44 renders")]
    assert found == ["thirteen Prometheus alerts", "44 renders"]
    assert COUNT.search("the draft's two patches together") is None
