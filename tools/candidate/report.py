"""The candidate report: one verdict per patch, every GDN contract link, the diffs, what next.

Why this exists: a maintainer deciding whether the engine can move to a new SGLang needs the
evidence and the decision side by side. Each patch gets one verdict, derived in this order:

1. ``port``: its target does not import in the candidate (the patch has nothing to wrap);
2. ``drop``: the behaviour probe shows SGLang itself now does the right thing (fixed upstream);
3. ``port``: the patch's own tests fail against the candidate (run with the candidate's pins, so
   a changed fingerprint alone fails nothing), or the drift guard refuses it for a reason other
   than its pins (an sgl-kernel-npu parameter, say);
4. ``keep``: every pinned target is unchanged (or changed in comments, docstrings or layout
   only: the fingerprint is the same) and the patch applies as it is;
5. ``re-pin``: a pinned target changed, the tests pass with the new fingerprint: the change is
   one the patch does not depend on (each change named from the diff, never beyond it).

The contract links keep their own verdicts (``pass``, ``fail``, ``unknown``) beside the diff of
the SGLang code each reads. The two links whose other side is sgl-kernel-npu's (``mover``,
``decode_kernel``) fail when SGLang no longer imports the kernel's name, and otherwise say what the
contract read: ``unknown`` where the kernel's file was not there to read (the candidate's venv
has no sgl-kernel-npu; the image build reads it), never ``pass`` for what nobody read.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_npu.patches import gdn_contract
from qwen_npu.patches.registry import GDN_CONTRACT, PATCHES
from tools.candidate import sources

KEEP, REPIN, PORT, DROP = "keep", "re-pin", "port", "drop"
REPIN_TARGET = "make sglang-candidate CANDIDATE={version} REPIN=1"


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
        text = f"{self.passed}/{self.total} pass"
        if self.skipped:
            text += f", {self.skipped} skipped"
        return text if not self.failed else f"{len(self.failed)} of {self.total} FAIL"


_WHERE = re.compile(r"^(\S+\.py):(\d+): (\S.*)$", re.MULTILINE)


def _failure_line(element: ET.Element) -> str:
    """``file:line: Error`` where it was raised (pytest's last traceback entry) and the message."""
    text = element.text or ""
    message = (element.get("message") or "").splitlines()
    places = _WHERE.findall(text)
    where = f"{places[-1][0]}:{places[-1][1]}" if places else "?"
    first = message[0] if message else (places[-1][2] if places else "no message")
    return f"{where}: {first[:300]}"


def parse_junit(path: Path) -> dict[str, TestFile]:
    """Test file (``tests/patches/test_x.py``) -> its results."""
    files: dict[str, TestFile] = {}
    try:
        tree = ET.parse(path)
    except (OSError, ET.ParseError):
        return files
    for case in tree.iter("testcase"):
        classname = case.get("classname") or ""
        parts = classname.split(".")
        # tests.patches.test_x[.Class] -> tests/patches/test_x.py
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        file = "/".join(parts) + ".py" if parts else classname
        row = files.setdefault(file, TestFile(file))
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            row.failed.append((case.get("name") or "?", _failure_line(problem)))
        elif case.find("skipped") is not None:
            row.skipped += 1
        else:
            row.passed += 1
    return files


def patch_test_file(checkout: Path, module: str) -> str:
    """The patch's own test file: ``test_<module's last part>.py`` under tests/patches/."""
    name = f"test_{module.rsplit('.', 1)[-1]}.py"
    found = sorted((checkout / "tests" / "patches").rglob(name))
    return str(found[0].relative_to(checkout)) if found else f"tests/patches/{name}"


CONTRACT_TEST_FILE = "tests/patches/test_gdn_contract.py"


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
    if all("/sglang/" in p for p in places):
        return " (raised in SGLang)"
    return ""


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


def _changed(changes: Sequence[sources.Change]) -> list[sources.Change]:
    return [c for c in changes if c.kind != sources.UNCHANGED]


def _diff_cell(changes: Sequence[sources.Change]) -> str:
    changed = _changed(changes)
    if not changed:
        return "none"
    return "; ".join(c.summary.split(": ", 1)[1] if ": " in c.summary else c.summary
                     for c in changed)  # fmt: skip


def patch_rows(
    probe: Mapping[str, Any],
    changes: Sequence[sources.Change],
    tests: Mapping[str, TestFile],
    checkout: Path,
    version: str,
) -> list[PatchRow]:
    rows = []
    for info in PATCHES:
        data = probe["patches"][info.name]
        mine = tuple(c for c in changes if c.unit.owner == info.name)
        test = tests.get(patch_test_file(checkout, info.module)) or TestFile(
            patch_test_file(checkout, info.module)
        )
        bad_import = next((i for i in data["imports"] if not i["ok"]), None)
        imports = "yes" if bad_import is None else f"NO: {bad_import['error']}"
        probe_said = str(data["probe"])
        changed = _changed(mine)
        cosmetic = all(c.kind == sources.COSMETIC for c in changed)
        if bad_import is not None or data["state"] == "target-missing":
            verdict, reason = PORT, f"the target does not load in {version}: {data['detail']}"
        elif probe_said == "fixed":
            verdict, reason = DROP, f"the behaviour probe shows the fix in SGLang {version}"
        elif not test.green:
            first = (
                test.failed[0][1]
                if test.failed
                else "no test of it ran (pytest.log in the report's folder says why)"
            )
            verdict, reason = (
                PORT,
                f"its tests fail against {version} ({test.said}); first: {first}"
                + raised_in(test.failed),
            )
        elif any(c.kind == sources.MISSING for c in changed):
            missing = next(c for c in changed if c.kind == sources.MISSING)
            verdict, reason = PORT, missing.summary
        elif not changed or cosmetic:
            if data["state"] == "applied":
                note = "unchanged" if not changed else "changed in comments/docstrings only"
                verdict, reason = KEEP, f"every pinned target {note}; the patch applies as it is"
            else:
                verdict, reason = PORT, f"the drift guard refuses it: {data['detail']}"
        else:
            said = "; ".join(c.summary for c in changed)
            verdict, reason = (
                REPIN,
                f"{said}; the patch's {test.total} tests pass against it with the new pins",
            )
        rows.append(
            PatchRow(info.name, imports, probe_said, data["state"], _diff_cell(mine), test.said,
                     verdict, reason, mine, tuple(test.failed))
        )  # fmt: skip
    return rows


def _expected_binding(relative_file: str, name: str) -> tuple[str, str]:
    return ("sgl_kernel_npu." + relative_file.removesuffix(".py").replace("/", "."), name)


#: The sgl-kernel-npu names SGLang must import for the mover and decode links to mean anything.
SGLANG_SIDE = {
    "mover": _expected_binding(gdn_contract.MOVER_FILE, sources.MOVER_NAME),
    "decode_kernel": _expected_binding(gdn_contract.DECODE_FILE, gdn_contract.DECODE_WRAPPER),
}


def link_rows(probe: Mapping[str, Any], changes: Sequence[sources.Change]) -> list[LinkRow]:
    rows = []
    for link in GDN_CONTRACT:
        mine = tuple(c for c in changes if c.unit.owner == f"gdn_contract.{link.name}")
        checked = probe["contract"].get(link.name, {"verdict": "unknown", "evidence": "not run"})
        verdict, evidence = checked["verdict"], checked["evidence"]
        if link.name in SGLANG_SIDE:
            module, name = SGLANG_SIDE[link.name]
            found = [c.candidate for c in mine if c.candidate is not None]
            bound = any((module, name) in f.imports for f in found)
            kernel = (
                "the kernel's file is sgl-kernel-npu's, read on the image "
                f"(`patches verify --build`): {evidence}"
            )
            if not bound:
                verdict = gdn_contract.FAIL
                evidence = f"SGLang no longer imports {name} from {module}; {kernel}"
            elif verdict == gdn_contract.PASS:
                evidence = f"SGLang imports {name} from {module}; {kernel}"
            else:
                # SGLang's side holds, the kernel's was not read (or fails): the link says what
                # its evidence says, never a pass it did not see
                evidence = f"SGLang imports {name} from {module}, but {kernel}"
        rows.append(LinkRow(link.name, verdict, evidence, _diff_cell(mine), mine))
    return rows


def next_step(rows: Sequence[PatchRow], links: Sequence[LinkRow], version: str, pinned: str) -> str:
    ports = [r.name for r in rows if r.verdict == PORT]
    drops = [r.name for r in rows if r.verdict == DROP]
    repins = [r.name for r in rows if r.verdict == REPIN]
    broken = [link.name for link in links if link.verdict == "fail"]
    repin = REPIN_TARGET.format(version=version)
    if ports:
        return (
            f"port {', '.join(ports)} (the failures above) before moving to {version}; "
            f"keep SGLANG_VERSION={pinned} until `make sglang-candidate CANDIDATE={version}` shows "
            'no port (docs/patches.md, "When SGLang releases")'
        )
    if broken:
        return (
            f"do not move to {version}: the GDN state contract fails at {', '.join(broken)} "
            '(docs/patches.md, "The GDN state contract")'
        )
    tail = "; then `make setup` and `make test`, and review `git diff`"
    if drops:
        return (
            f"delete {', '.join(drops)} (fixed upstream in {version}) with its registry entry, "
            f"hook trigger and tests; `{repin}` moves the pins" + tail
        )
    if repins:
        return (
            f"read the diffs of {', '.join(repins)} above; if they are as said, `{repin}` writes "
            f"the new pins and moves SGLANG_VERSION to {version}" + tail
        )
    if version != pinned:
        return (
            f"nothing to port: `{repin}` moves SGLANG_VERSION to {version} (no pin changes)" + tail
        )
    return f"nothing: {version} is the pinned release and every patch applies unchanged"


def movable(rows: Sequence[PatchRow], links: Sequence[LinkRow]) -> bool:
    """Whether ``--repin`` may move the version: no port, no failing link."""
    return all(r.verdict != PORT for r in rows) and all(link.verdict != "fail" for link in links)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(
    *,
    version: str,
    pinned: str,
    origin: str,
    probe: Mapping[str, Any],
    rows: Sequence[PatchRow],
    links: Sequence[LinkRow],
    timings: Mapping[str, float],
    contract_tests: TestFile,
) -> str:
    """The report as Markdown (what the terminal shows and report.md holds)."""
    total = sum(timings.values())
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
    out = [
        f"# SGLang {version} against the pinned {pinned}",
        "",
        f"Candidate: sglang {probe.get('sglang_version')} from {origin}, Python "
        f"{probe.get('python')}; {total:.0f} s ({steps}).",
        "",
        "| patch | target imports | behaviour probe | drift guard (pinned PINS) | diff against "
        f"{pinned} | its tests | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.name} | {_cell(r.imports)} | {r.probe} | {r.guard} | {_cell(r.diff)} | "
            f"{r.tests} | **{r.verdict}** |"
        )
    out += ["", "| GDN contract link | verdict | diff of the SGLang code it reads | evidence |",
            "|---|---|---|---|"]  # fmt: skip
    for link in links:
        out.append(
            f"| {link.name} | {link.verdict} | {_cell(link.diff)} | {_cell(link.evidence)} |"
        )
    out += ["", f"Contract tests ({contract_tests.path}): {contract_tests.said}."]
    out += ["", "## Why each verdict", ""]
    out += [f"- {r.name}: **{r.verdict}**: {r.reason}" for r in rows]
    failing = [(r.name, f) for r in rows for f in r.failures]
    if failing:
        out += ["", "## Failing tests", ""]
        out += [f"- {name}: `{test}`: {where}" for name, (test, where) in failing]
    diffs = [c for r in rows for c in r.changes if c.diff and c.kind != sources.UNCHANGED]
    diffs += [c for link in links for c in link.changes if c.diff and c.kind != sources.UNCHANGED]
    out += ["", f"## Diffs against {pinned} ({len(diffs)})", ""]
    if not diffs:
        out.append(f"None: every unit the patches pin and the contract reads is as in {pinned}.")
    for c in diffs:
        out += [f"### {c.unit.owner}: {c.summary}", "", "```diff", c.diff.rstrip("\n"), "```", ""]
    out += ["", f"Next: {next_step(rows, links, version, pinned)}", ""]
    return "\n".join(out)


def as_json(
    *, version: str, pinned: str, rows: Sequence[PatchRow], links: Sequence[LinkRow],
    timings: Mapping[str, float],
) -> dict[str, Any]:  # fmt: skip
    return {
        "candidate": version,
        "pinned": pinned,
        "seconds": {k: round(v, 1) for k, v in timings.items()},
        "patches": [
            {
                "name": r.name,
                "verdict": r.verdict,
                "reason": r.reason,
                "imports": r.imports,
                "probe": r.probe,
                "guard": r.guard,
                "tests": r.tests,
                "failures": [list(f) for f in r.failures],
                "changes": [
                    {"unit": c.unit.label, "kind": c.kind, "diff": c.diff} for c in r.changes
                ],
            }
            for r in rows
        ],
        "gdn_contract": [
            {
                "link": link.name,
                "verdict": link.verdict,
                "evidence": link.evidence,
                "changes": [
                    {"unit": c.unit.label, "kind": c.kind, "diff": c.diff} for c in link.changes
                ],
            }
            for link in links
        ],
        "movable": movable(rows, links),
        "next": next_step(rows, links, version, pinned),
    }
