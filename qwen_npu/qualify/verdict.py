"""A claim, its checks and their verdicts, and the exit status they add up to.

One place for the rule every claim follows: a check passes, fails or is skipped with a reason; a
check only the target can run (an NPU, the engine's state file, its start-up log) is marked
``npu_only``. A claim fails when one of its checks fails, is skipped when every check was, and
passes otherwise. ``--require-npu`` turns a skipped NPU-only check into a failure (a pipeline gate
on a node must not pass because the evidence was missing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

PASS: Final = "pass"
FAIL: Final = "fail"
SKIPPED: Final = "skipped"
Verdict = Literal["pass", "fail", "skipped"]


@dataclass(frozen=True)
class Check:
    """One piece of evidence: its verdict and what was seen (or why it was not looked at)."""

    name: str
    verdict: Verdict
    evidence: str
    npu_only: bool = False

    @classmethod
    def of(cls, name: str, ok: bool, evidence: str, npu_only: bool = False) -> Check:
        return cls(name, PASS if ok else FAIL, evidence, npu_only)

    @classmethod
    def skip(cls, name: str, reason: str, npu_only: bool = False) -> Check:
        return cls(name, SKIPPED, reason, npu_only)


@dataclass
class Claim:
    """One claim: its checks, a one-line summary and the data behind it (report.json)."""

    name: str
    summary: str
    checks: list[Check] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        verdicts = {c.verdict for c in self.checks}
        if FAIL in verdicts:
            return FAIL
        if not verdicts or verdicts == {SKIPPED}:
            return SKIPPED
        return PASS

    def npu_skipped(self) -> list[Check]:
        """The NPU-only checks that were skipped (failures under ``--require-npu``)."""
        return [c for c in self.checks if c.npu_only and c.verdict == SKIPPED]

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict,
            "summary": self.summary,
            "checks": [asdict(c) for c in self.checks],
            "data": self.data,
        }


def skipped_claim(name: str, reason: str, npu_only: bool = False) -> Claim:
    """A claim that did not run, with the reason as its one check."""
    return Claim(name, reason, [Check.skip(name, reason, npu_only)])


def failed(claims: Sequence[Claim], require_npu: bool) -> list[str]:
    """Why the qualification fails: the failed claims, and under ``require_npu`` the claims with a
    skipped NPU-only check; empty when it passes."""
    out = [c.name for c in claims if c.verdict == FAIL]
    if require_npu:
        out += [f"{c.name} (NPU-only skipped)" for c in claims if c.npu_skipped()]
    return out


def exit_status(claims: Sequence[Claim], require_npu: bool) -> int:
    """0 when every claim that ran passed (and, under ``require_npu``, none NPU-only skipped)."""
    return 1 if failed(claims, require_npu) else 0
