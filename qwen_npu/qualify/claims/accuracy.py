"""The accuracy claim: exact match on a staged GSM8K-format set, with its interval, paired.

The file is JSONL, one ``{"question": ..., "answer": "... #### 42"}`` per line (GSM8K's own
format), staged beside the model (``qwen-npu fetch``); nothing downloads at run time. The first
``shots`` lines are the few-shot examples (``Question: ...\\nAnswer: ...``, as lm-eval's gsm8k
builds them; SGLang's NPU CI runs gsm8k 5-shot) and are not scored. A model's answer is the number
after its first ``####``, else its last number (lm-eval's flexible extract); both sides are
compared as numbers.

The verdict: accuracy with a 95% Wilson interval; ``--min-accuracy X`` fails a point estimate
below X. With ``--compare URL`` both sides answer the same questions and the difference is paired
(per question: 1, 0 or -1), with a 95% normal interval on its mean; by default the claim fails
only when the target is worse beyond that interval (its upper bound below 0): MTP must be no
worse than MTP off.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_npu.qualify.client import Endpoint, EndpointError
from qwen_npu.qualify.verdict import Check, Claim

Z95 = 1.959963984540054
DEFAULT_SHOTS = 5
MAX_NEW_TOKENS = 320
_FINAL = re.compile(r"####\s*\$?\s*(-?[\d,]*\.?\d+)")
_NUMBER = re.compile(r"-?[\d,]*\.?\d+")


class EvalError(ValueError):
    """A bad eval file; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class Item:
    """One question and its reference solution; ``target`` is the number after ``####``."""

    question: str
    solution: str
    target: str


def load(path: Path, shots: int) -> tuple[list[Item], list[Item]]:
    """(the few-shot examples, the scored items); EvalError on anything not GSM8K's shape."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalError(f"--eval {path}: cannot read it as UTF-8 text ({exc})") from None
    items = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise EvalError(
                f"--eval {path}: line {n} is not JSON; give GSM8K JSONL, one "
                '{"question": ..., "answer": "... #### <number>"} per line'
            ) from None
        q, a = (row.get("question"), row.get("answer")) if isinstance(row, dict) else (None, None)
        if not isinstance(q, str) or not isinstance(a, str) or not q.strip():
            raise EvalError(f"--eval {path}: line {n} needs string keys 'question' and 'answer'")
        m = _FINAL.search(a)
        if m is None:
            raise EvalError(f"--eval {path}: line {n}'s answer has no '#### <number>' at its end")
        items.append(Item(q.strip(), a.strip(), normalise(m.group(1))))
    if len(items) <= shots:
        raise EvalError(
            f"--eval {path}: {len(items)} questions, but {shots} are few-shot examples; give "
            "more lines or a smaller --eval-shots"
        )
    return items[:shots], items[shots:]


def normalise(number: str) -> str:
    """A number as a canonical string: no commas, no trailing zeros after a point."""
    value = number.replace(",", "").rstrip(".")
    try:
        f = float(value)
    except ValueError:
        return value
    return str(int(f)) if f.is_integer() else repr(f)


def extract(text: str) -> str | None:
    """The model's answer: after its first ``####``, else its last number."""
    m = _FINAL.search(text)
    if m is not None:
        return normalise(m.group(1))
    numbers = _NUMBER.findall(text)
    return normalise(numbers[-1]) if numbers else None


def prompt(shots: Sequence[Item], question: str) -> str:
    head = "".join(f"Question: {s.question}\nAnswer: {s.solution}\n\n" for s in shots)
    return f"{head}Question: {question}\nAnswer:"


def wilson(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def paired(a: Sequence[bool], b: Sequence[bool], z: float = Z95) -> tuple[float, float, float]:
    """(mean of a - b, and its normal interval) over paired outcomes."""
    diffs = [int(x) - int(y) for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    if n == 0:
        return 0.0, -1.0, 1.0
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    half = z * math.sqrt(var / n)
    return mean, mean - half, mean + half


def _score(
    endpoint: Endpoint, shots: Sequence[Item], items: Sequence[Item]
) -> tuple[list[bool], list[dict[str, Any]], int]:
    outcomes: list[bool] = []
    rows: list[dict[str, Any]] = []
    errors = 0
    for item in items:
        try:
            text = endpoint.generate(prompt(shots, item.question), MAX_NEW_TOKENS).text
        except EndpointError as exc:
            errors += 1
            text, got = f"<error: {exc}>", None
        else:
            got = extract(text)
        outcomes.append(got == item.target)
        rows.append({"target": item.target, "got": got, "correct": got == item.target})
    return outcomes, rows, errors


def run(
    target: Endpoint,
    eval_file: Path,
    shots: int = DEFAULT_SHOTS,
    limit: int | None = None,
    min_accuracy: float | None = None,
    compare_to: Endpoint | None = None,
) -> Claim:
    """Score the target (and the compare side) on the file's questions."""
    examples, items = load(eval_file, shots)
    items = items[:limit] if limit else items
    outcomes, rows, errors = _score(target, examples, items)
    n, right = len(outcomes), sum(outcomes)
    lo, hi = wilson(right, n)
    acc = right / n
    data: dict[str, Any] = {
        "file": str(eval_file),
        "shots": len(examples),
        "questions": n,
        "target": {"correct": right, "accuracy": acc, "wilson95": [lo, hi], "errors": errors},
        "rows": rows,
    }
    line = f"{right}/{n} = {acc:.3f} (95% Wilson {lo:.3f}..{hi:.3f}) on {eval_file.name}"
    checks = [Check.of("answered", errors == 0, f"{n - errors} of {n} questions answered")]
    if min_accuracy is None:
        checks.append(Check.of("exact match", True, f"{line}; no --min-accuracy set"))
    else:
        checks.append(
            Check.of("exact match", acc >= min_accuracy, f"{line}; --min-accuracy {min_accuracy}")
        )
    if compare_to is not None:
        other, other_rows, other_errors = _score(compare_to, examples, items)
        o_right = sum(other)
        o_lo, o_hi = wilson(o_right, n)
        mean, d_lo, d_hi = paired(outcomes, other)
        data["compare"] = {
            "url": compare_to.url,
            "correct": o_right,
            "accuracy": o_right / n,
            "wilson95": [o_lo, o_hi],
            "errors": other_errors,
            "paired_difference": {"mean": mean, "ci95": [d_lo, d_hi]},
        }
        for row, o in zip(rows, other_rows, strict=True):
            row["compare_got"] = o["got"]
        checks.append(
            Check.of(
                "no worse than the compare side",
                d_hi >= 0.0,
                f"target {right}/{n} vs compare {o_right}/{n}: paired difference {mean:+.3f} "
                f"(95% {d_lo:+.3f}..{d_hi:+.3f}); fails when the whole interval is below 0",
            )
        )
    summary = next((c.evidence for c in checks if c.verdict == "fail"), line)
    return Claim("accuracy", summary, checks, data)
