"""The answers claim: greedy outputs of the built-in prompts, sane, and equal to a second side's.

Degeneration is the canary's scoring (qwen_npu/sidecar/canary.py) with the canary's threshold,
over the whole answer and over its second half, so an answer that opens sanely and then loops is
caught as well as one that loops from the start.

With ``--compare URL`` (the same model with MTP off, or on the copy route) both sides answer each
prompt at temperature 0 and the outputs are compared token by token (the servers' ``output_ids``;
the canary's word tokens when a server returns none): identical or not, the common prefix, and the
first divergence in tokens and text. Greedy outputs of two correct deployments may still part late
in an answer: the bf16 SSM state rounds differently along the two paths (sgl-kernel-npu #651), and
once one near-tie flips the rest differs. So a divergence fails only when it comes early, inside
the first ``early_tokens`` tokens (default 16) of the shorter answer; the identical share is
reported either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from qwen_npu.qualify.claims import EARLY_TOKENS
from qwen_npu.qualify.client import Answer, Endpoint, EndpointError
from qwen_npu.qualify.prompts import Prompt
from qwen_npu.qualify.verdict import Check, Claim
from qwen_npu.sidecar.canary import golden_prefix_chars, score, tokens
from qwen_npu.sidecar.config import Settings

DEFAULT_EARLY_TOKENS = EARLY_TOKENS
#: The canary's own threshold (the sidecar's QWEN_NPU_CANARY_DEGENERATION_MAX default).
DEGENERATION_MAX = float(Settings.model_fields["canary_degeneration_max"].default)
#: An answer's second half is scored only when it has at least this many word tokens.
MIN_TAIL_TOKENS = 12
_SHOW = 6  # tokens shown on each side of a divergence
_SHOW_CHARS = 60


@dataclass(frozen=True)
class Degeneration:
    """The canary's scores of one answer, whole and second half."""

    score: float
    tail_score: float
    longest_repeat_tokens: int

    @property
    def degenerated(self) -> bool:
        return max(self.score, self.tail_score) > DEGENERATION_MAX


def degeneration(text: str) -> Degeneration:
    whole = score(text.strip())
    toks = tokens(text)
    tail = toks[len(toks) // 2 :]
    tail_score = score(" ".join(tail)).degeneration_score if len(tail) >= MIN_TAIL_TOKENS else 0.0
    return Degeneration(whole.degeneration_score, tail_score, whole.longest_repeat_tokens)


@dataclass(frozen=True)
class Divergence:
    """Where two greedy answers part: the token index and a window of each side."""

    token: int
    unit: str  # "ids" (the servers' output_ids) or "words" (the canary's word tokens)
    a_tokens: list[Any]
    b_tokens: list[Any]
    char: int
    a_text: str
    b_text: str


@dataclass(frozen=True)
class Comparison:
    """Two answers to one prompt."""

    identical: bool
    common_prefix_tokens: int
    tokens_a: int
    tokens_b: int
    divergence: Divergence | None

    def early(self, early_tokens: int) -> bool:
        """Parted inside the first ``early_tokens`` tokens of the shorter answer."""
        if self.identical:
            return False
        return self.common_prefix_tokens < min(early_tokens, self.tokens_a, self.tokens_b) or (
            min(self.tokens_a, self.tokens_b) == 0
        )


def _sequence(answer: Answer, other: Answer) -> tuple[Sequence[Any], str]:
    if answer.ids is not None and other.ids is not None:
        return answer.ids, "ids"
    return tokens(answer.text), "words"


def compare(a: Answer, b: Answer) -> Comparison:
    """Token by token: identical, the common prefix, the first divergence."""
    sa, unit = _sequence(a, b)
    sb, _ = _sequence(b, a)
    common = 0
    for x, y in zip(sa, sb, strict=False):
        if x != y:
            break
        common += 1
    identical = common == len(sa) == len(sb) and a.text == b.text
    divergence = None
    if not identical:
        char = golden_prefix_chars(a.text, b.text)
        lo = max(common - _SHOW, 0)
        divergence = Divergence(
            token=common,
            unit=unit,
            a_tokens=list(sa[lo : common + _SHOW]),
            b_tokens=list(sb[lo : common + _SHOW]),
            char=char,
            a_text=a.text[char : char + _SHOW_CHARS],
            b_text=b.text[char : char + _SHOW_CHARS],
        )
    return Comparison(identical, common, len(sa), len(sb), divergence)


def _answer_all(
    endpoint: Endpoint, prompts: Sequence[Prompt]
) -> tuple[dict[str, Answer], dict[str, str]]:
    answers: dict[str, Answer] = {}
    errors: dict[str, str] = {}
    for p in prompts:
        try:
            answers[p.id] = endpoint.generate(p.text, p.max_new_tokens)
        except EndpointError as exc:
            errors[p.id] = str(exc)
    return answers, errors


def _degeneration_check(name: str, answers: dict[str, Answer]) -> tuple[Check, dict[str, Any]]:
    scores = {pid: degeneration(a.text) for pid, a in answers.items()}
    bad = [pid for pid, d in scores.items() if d.degenerated]
    data = {pid: asdict(d) for pid, d in scores.items()}
    if bad:
        d = scores[bad[0]]
        head = answers[bad[0]].text.strip()[:_SHOW_CHARS]
        return Check.of(
            name,
            False,
            f"{len(bad)} of {len(scores)} answers degenerated, first {bad[0]} "
            f"(score {d.score:.2f}, second half {d.tail_score:.2f}, longest repeat "
            f"{d.longest_repeat_tokens} tokens, limit {DEGENERATION_MAX}): {head!r}...",
        ), data
    worst = max((max(d.score, d.tail_score) for d in scores.values()), default=0.0)
    return Check.of(
        name, True, f"{len(scores)} answers, worst score {worst:.2f} (limit {DEGENERATION_MAX})"
    ), data


def _answered_check(name: str, url: str, errors: dict[str, str], total: int) -> Check:
    if errors:
        first = next(iter(errors))
        return Check.of(
            name,
            False,
            f"{len(errors)} of {total} prompts not answered by {url}, first "
            f"{first}: {errors[first]}",
        )
    return Check.of(name, True, f"{total} prompts answered by {url} at temperature 0")


def run(
    target: Endpoint,
    prompts: Sequence[Prompt],
    compare_to: Endpoint | None = None,
    early_tokens: int = DEFAULT_EARLY_TOKENS,
) -> Claim:
    """Ask every prompt on the target (and the compare side), then judge."""
    answers, errors = _answer_all(target, prompts)
    checks = [_answered_check("answered", target.url, errors, len(prompts))]
    check, scores = _degeneration_check("no degeneration", answers)
    checks.append(check)
    data: dict[str, Any] = {
        "prompts": [
            {"id": p.id, "kind": p.kind, "max_new_tokens": p.max_new_tokens} for p in prompts
        ],
        "target": {"url": target.url, "degeneration": scores, "errors": errors},
        "early_tokens": early_tokens,
        "degeneration_max": DEGENERATION_MAX,
    }
    if compare_to is None:
        checks.append(
            Check.skip(
                "agreement",
                "no --compare URL: the greedy outputs were not compared with MTP off or the "
                "copy route",
            )
        )
        return Claim("answers", _summary(checks), checks, data)

    other, other_errors = _answer_all(compare_to, prompts)
    checks.append(_answered_check("answered (compare)", compare_to.url, other_errors, len(prompts)))
    check, other_scores = _degeneration_check("no degeneration (compare)", other)
    checks.append(check)
    data["compare"] = {"url": compare_to.url, "degeneration": other_scores, "errors": other_errors}
    both = [p for p in prompts if p.id in answers and p.id in other]
    comparisons = {p.id: compare(answers[p.id], other[p.id]) for p in both}
    data["comparisons"] = {pid: asdict(c) for pid, c in comparisons.items()}
    checks.append(_agreement_check(comparisons, early_tokens))
    return Claim("answers", _summary(checks), checks, data)


def _agreement_check(comparisons: dict[str, Comparison], early_tokens: int) -> Check:
    if not comparisons:
        return Check.of("agreement", False, "no prompt was answered by both sides")
    same = sum(1 for c in comparisons.values() if c.identical)
    share = same / len(comparisons)
    prefixes = sorted(c.common_prefix_tokens for c in comparisons.values() if not c.identical)
    head = f"identical {same}/{len(comparisons)} ({share:.0%})"
    if prefixes:
        head += f", common prefix of the others {prefixes[0]}..{prefixes[-1]} tokens"
    early = [pid for pid, c in comparisons.items() if c.early(early_tokens)]
    if early:
        pid = early[0]
        d = comparisons[pid].divergence
        assert d is not None
        return Check.of(
            "agreement",
            False,
            f"{head}; {len(early)} diverge inside the first {early_tokens} tokens, first "
            f"{pid} at token {d.token} ({d.unit} {d.a_tokens} vs {d.b_tokens}; text "
            f"{d.a_text!r} vs {d.b_text!r})",
        )
    first = next((pid for pid, c in comparisons.items() if not c.identical), None)
    tail = ""
    if first is not None:
        d = comparisons[first].divergence
        assert d is not None
        tail = f"; first late divergence {first} at token {d.token} (allowed: bf16 state rounding)"
    return Check.of("agreement", True, head + tail)


def _summary(checks: Sequence[Check]) -> str:
    bad = [c for c in checks if c.verdict == "fail"]
    return bad[0].evidence if bad else "; ".join(c.evidence for c in checks if c.verdict == "pass")
