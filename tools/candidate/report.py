"""The candidate report: one verdict per patch, every GDN contract link, the diffs, what next.

Why: moving to a new SGLang needs the evidence and the decision side by side. A patch's verdict is
the first that holds: ``port`` (its target does not import), ``drop`` (the probe says SGLang fixed
it), ``port`` (its tests fail with the candidate's pins, or the guard refuses it otherwise),
``keep`` (no pinned target changed but comments), ``re-pin`` (a target changed, its tests pass).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_npu.patches import gdn_contract
from qwen_npu.patches.registry import GDN_CONTRACT, PATCHES
from tools.candidate import sources
from tools.paths import REPO

KEEP, REPIN, PORT, DROP = "keep", "re-pin", "port", "drop"
CONTRACT_TEST_FILE = "tests/patches/test_gdn_contract.py"


@dataclass
class TestFile:
    """One test file's results from the candidate run (pytest's JUnit XML)."""

    path: str
    passed: int = 0
    skipped: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (test name, where: message)

    @property
    def total(self) -> int:
        return self.passed + self.skipped + len(self.failed)

    @property
    def green(self) -> bool:
        return self.total > 0 and not self.failed

    @property
    def said(self) -> str:
        if self.total == 0:
            return "none ran"
        if self.failed:
            return f"{len(self.failed)} of {self.total} FAIL"
        skipped = f", {self.skipped} skipped" if self.skipped else ""
        return f"{self.passed}/{self.total} pass{skipped}"


_WHERE = re.compile(r"^(\S+\.py):(\d+): (\S.*)$", re.MULTILINE)


def parse_junit(path: Path) -> dict[str, TestFile]:
    """Test file (``tests/patches/test_x.py``) -> its results; a failure as ``file:line:
    message`` where it was raised (pytest's last traceback entry)."""
    files: dict[str, TestFile] = {}
    try:
        cases = list(ET.parse(path).iter("testcase"))
    except (OSError, ET.ParseError):
        return files
    for case in cases:
        parts = (case.get("classname") or "").split(".")
        while parts and not parts[-1].startswith("test_"):  # tests.patches.test_x[.Class]
            parts.pop()
        file = "/".join(parts) + ".py" if parts else case.get("classname") or ""
        row = files.setdefault(file, TestFile(file))
        problem = case.find("failure")
        problem = case.find("error") if problem is None else problem
        if problem is not None:
            places = _WHERE.findall(problem.text or "")
            message = (problem.get("message") or "").splitlines()
            where = f"{places[-1][0]}:{places[-1][1]}" if places else "?"
            first = message[0] if message else (places[-1][2] if places else "no message")
            row.failed.append((case.get("name") or "?", f"{where}: {first[:300]}"))
        elif case.find("skipped") is not None:
            row.skipped += 1
        else:
            row.passed += 1
    return files


def patch_test_file(module: str) -> str:
    name = f"test_{module.rsplit('.', 1)[-1]}.py"
    found = sorted((REPO / "tests" / "patches").rglob(name))
    return str(found[0].relative_to(REPO)) if found else f"tests/patches/{name}"


def raised_in(failed: Sequence[tuple[str, str]]) -> str:
    """Where the failures were raised, when they agree: a test's own code (its harness calls an
    SGLang API that moved), the patch, or SGLang."""
    places = {where.split(":", 1)[0] for _, where in failed}
    if not places:
        return ""
    if all(p.startswith("tests/") for p in places):
        return " (raised in the tests' own code, not in the patch: port the tests' harness)"
    if all(p.startswith("qwen_npu/") for p in places):
        return " (raised in the patch)"
    return " (raised in SGLang)" if all("/sglang/" in p for p in places) else ""


@dataclass(frozen=True)
class PatchRow:
    name: str
    imports: str
    probe: str
    guard: str
    diff: str
    tests: str
    verdict: str
    reason: str
    changes: tuple[sources.Change, ...]
    failures: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class LinkRow:
    name: str
    verdict: str
    evidence: str
    diff: str
    changes: tuple[sources.Change, ...]


def _changed(changes: Iterable[sources.Change]) -> list[sources.Change]:
    return [c for c in changes if c.kind != sources.UNCHANGED]


def _diff_cell(changes: Sequence[sources.Change]) -> str:
    return "; ".join(c.summary.split(": ", 1)[-1] for c in _changed(changes)) or "none"


def _verdict(
    data: Mapping[str, Any], changed: list[sources.Change], test: TestFile, version: str
) -> tuple[str, str]:
    missing = [c for c in changed if c.kind == sources.MISSING]
    if data["state"] == "target-missing":  # probe's word for a trigger import that failed
        return PORT, f"the target does not load in {version}: {data['detail']}"
    if data["probe"] == "fixed":
        return DROP, f"the behaviour probe shows the fix in SGLang {version}"
    if not test.green:
        first = test.failed[0][1] if test.failed else "none ran (pytest.log says why)"
        said = f"its tests fail against {version} ({test.said}); first: {first}"
        return PORT, said + raised_in(test.failed)
    if missing:
        return PORT, missing[0].summary
    if all(c.kind == sources.COSMETIC for c in changed):
        if data["state"] != "applied":
            return PORT, f"the drift guard refuses it: {data['detail']}"
        note = "changed in comments/docstrings only" if changed else "unchanged"
        return KEEP, f"every pinned target {note}; the patch applies as it is"
    said = "; ".join(c.summary for c in changed)
    return REPIN, f"{said}; the patch's {test.total} tests pass against it with the new pins"


def patch_rows(
    probe: Mapping[str, Any],
    changes: Sequence[sources.Change],
    tests: Mapping[str, TestFile],
    version: str,
) -> list[PatchRow]:
    rows = []
    for info in PATCHES:
        data = probe["patches"][info.name]
        mine = tuple(c for c in changes if c.unit.owner == info.name)
        path = patch_test_file(info.module)
        test = tests.get(path) or TestFile(path)
        verdict = _verdict(data, _changed(mine), test, version)
        cells = (data["imports"], str(data["probe"]), data["state"], _diff_cell(mine), test.said)
        rows.append(PatchRow(info.name, *cells, *verdict, mine, tuple(test.failed)))
    return rows


def _kernel_name(relative_file: str, name: str) -> tuple[str, str]:
    return ("sgl_kernel_npu." + relative_file.removesuffix(".py").replace("/", "."), name)


#: The sgl-kernel-npu names SGLang must import for the mover and decode links to mean anything.
SGLANG_SIDE = {
    "mover": _kernel_name(gdn_contract.MOVER_FILE, sources.MOVER_NAME),
    "decode_kernel": _kernel_name(gdn_contract.DECODE_FILE, gdn_contract.DECODE_WRAPPER),
}


def link_rows(probe: Mapping[str, Any], changes: Sequence[sources.Change]) -> list[LinkRow]:
    rows = []
    for link in GDN_CONTRACT:
        mine = tuple(c for c in changes if c.unit.owner == f"gdn_contract.{link.name}")
        checked = probe["contract"].get(link.name, {"verdict": "unknown", "evidence": "not run"})
        verdict, evidence = checked["verdict"], checked["evidence"]
        if link.name in SGLANG_SIDE:
            module, name = SGLANG_SIDE[link.name]
            kernel = (
                "the kernel's file is sgl-kernel-npu's, read on the image "
                f"(`patches verify --build`): {evidence}"
            )
            if not any((module, name) in c.candidate.imports for c in mine if c.candidate):
                verdict = gdn_contract.FAIL
                evidence = f"SGLang no longer imports {name} from {module}; {kernel}"
            else:  # never a pass the kernel's side did not give
                joint = "; " if verdict == gdn_contract.PASS else ", but "
                evidence = f"SGLang imports {name} from {module}{joint}{kernel}"
        rows.append(LinkRow(link.name, verdict, evidence, _diff_cell(mine), mine))
    return rows


def next_step(rows: Sequence[PatchRow], links: Sequence[LinkRow], version: str, pinned: str) -> str:
    def named(verdict: str) -> str:
        return ", ".join(r.name for r in rows if r.verdict == verdict)

    broken = ", ".join(link.name for link in links if link.verdict == gdn_contract.FAIL)
    repin = f"`make sglang-candidate CANDIDATE={version} REPIN=1`"
    tail = "; then `make setup` and `make test`, and review `git diff`"
    if named(PORT):
        return (
            f"port {named(PORT)} (the failures above) before moving to {version}; keep "
            f"SGLANG_VERSION={pinned} until `make sglang-candidate CANDIDATE={version}` shows "
            'no port (docs/patches.md, "When SGLang releases")'
        )
    if broken:
        return (
            f"do not move to {version}: the GDN state contract fails at {broken} "
            '(docs/patches.md, "The GDN state contract")'
        )
    if named(DROP):
        return (
            f"delete {named(DROP)} (fixed upstream in {version}) with its registry entry, hook "
            f"trigger and tests; {repin} moves the pins{tail}"
        )
    if named(REPIN):
        return (
            f"read the diffs of {named(REPIN)} above; if they are as said, {repin} writes the new "
            f"pins and moves SGLANG_VERSION to {version}{tail}"
        )
    if version != pinned:
        return f"nothing to port: {repin} moves SGLANG_VERSION to {version} (no pin changes){tail}"
    return f"nothing: {version} is the pinned release and every patch applies unchanged"


@dataclass(frozen=True)
class Verdicts:
    version: str
    pinned: str
    rows: Sequence[PatchRow]
    links: Sequence[LinkRow]
    contract_tests: TestFile

    @property
    def movable(self) -> bool:
        """Whether ``--repin`` may move the pins: no port, no failing link, green contract tests."""
        ports = [r for r in self.rows if r.verdict == PORT]
        broken = [link for link in self.links if link.verdict == gdn_contract.FAIL]
        return not ports and not broken and self.contract_tests.green


def _table(head: str, rows: Iterable[Sequence[str]]) -> list[str]:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    return [f"| {head} |", "|" + "---|" * (head.count(" | ") + 1), *map(line, rows)]


def _json(row: PatchRow | LinkRow, fields: str) -> dict[str, Any]:
    changes = [{"unit": c.unit.label, "kind": c.kind, "diff": c.diff} for c in row.changes]
    return {f: getattr(row, f) for f in fields.split()} | {"changes": changes}


def render(
    verdicts: Verdicts, origin: str, probe: Mapping[str, Any], timings: Mapping[str, float]
) -> tuple[str, dict[str, Any]]:
    """The report as Markdown (what the terminal shows and report.md holds) and as JSON."""
    version, pinned, rows, links = verdicts.version, verdicts.pinned, verdicts.rows, verdicts.links
    contract_tests = verdicts.contract_tests
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
    after = next_step(rows, links, version, pinned)
    out = [
        f"# SGLang {version} against the pinned {pinned}",
        "",
        f"Candidate: sglang {probe.get('sglang_version')} from {origin}, Python "
        f"{probe.get('python')}; {sum(timings.values()):.0f} s ({steps}).",
        "",
        *_table(
            "patch | target imports | behaviour probe | drift guard (pinned PINS) | "
            f"diff against {pinned} | its tests | verdict",
            [
                (r.name, r.imports, r.probe, r.guard, r.diff, r.tests, f"**{r.verdict}**")
                for r in rows
            ],
        ),
        "",
        *_table(
            "GDN contract link | verdict | diff of the SGLang code it reads | evidence",
            [(link.name, link.verdict, link.diff, link.evidence) for link in links],
        ),
        "",
        f"Contract tests ({contract_tests.path}): {contract_tests.said}.",
        "",
        "## Why each verdict",
        "",
        *(f"- {r.name}: **{r.verdict}**: {r.reason}" for r in rows),
    ]
    failing = [f"- {r.name}: `{test}`: {where}" for r in rows for test, where in r.failures]
    out += ["", "## Failing tests", "", *failing] if failing else []
    every = [*(c for r in rows for c in r.changes), *(c for k in links for c in k.changes)]
    diffs = [c for c in _changed(every) if c.diff]
    out += ["", f"## Diffs against {pinned} ({len(diffs)})", ""]
    if not diffs:
        out.append(f"None: every unit the patches pin and the contract reads is as in {pinned}.")
    for c in diffs:
        out += [f"### {c.unit.owner}: {c.summary}", "", "```diff", c.diff.rstrip("\n"), "```", ""]
    out += ["", f"Next: {after}", ""]
    data = {
        "candidate": version,
        "pinned": pinned,
        "seconds": {k: round(v, 1) for k, v in timings.items()},
        "patches": [
            _json(r, "name verdict reason imports probe guard tests failures") for r in rows
        ],
        "gdn_contract": [{"link": k.name} | _json(k, "verdict evidence") for k in links],
        "movable": verdicts.movable,
        "next": after,
    }
    return "\n".join(out), data
