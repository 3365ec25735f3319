"""The decision every patch makes before it touches SGLang, and the record of what it decided.

Why this exists: the three patches share one procedure, and it must be the same for each so the
states mean the same thing everywhere (docs/architecture.md):

1. named in ``QWEN_NPU_DISABLE_PATCHES`` (or ``all``)      -> ``disabled``, SGLang untouched;
2. the target module or attribute is not there               -> ``target-missing``;
3. a behaviour probe shows the installed SGLang already
   does the right thing                                      -> ``upstream-fixed``, untouched;
4. the target's signature or source fingerprint differs
   from the pinned release's                                 -> ``drifted``, untouched, loud log;
5. otherwise the patch rebinds the target                    -> ``applied``.

A patch whose benefit depends on a collaborator it does not rebind (the scatter patch only chooses
the kernel's ``h_block_size``) also reports its ``effect`` when applied: ``tiles`` (the kernel
uses the value), ``ignored`` (it applies without effect) or ``unknown``.

Each outcome is logged as one structured line, kept in ``OUTCOMES`` for ``qwen-npu patches verify``
and written to the state file when ``QWEN_NPU_STATE_DIR`` is set.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import inspect
import os
import textwrap
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from qwen_npu.patches import state as state_file
from qwen_npu.patches.log import log
from qwen_npu.patches.registry import BY_NAME, ENV_DISABLE, PatchInfo, disable_requests

T = TypeVar("T")
Probe = Literal["fixed", "needed"] | None

#: What to do next, per state, for the log line and ``qwen-npu patches explain``.
NEXT_STEP: dict[str, str] = {
    "applied": "nothing; remove the patch once the upstream fix ships (qwen-npu patches explain)",
    "disabled": f"unset {ENV_DISABLE} (or drop this name from it) to apply the patch again",
    "upstream-fixed": "nothing; the installed SGLang no longer needs this patch, drop it",
    "drifted": (
        "the installed SGLang differs from the release this patch was written for; pin "
        "SGLANG_VERSION in docker/versions.env back, or port the patch and its fingerprint"
    ),
    "target-missing": (
        "check that SGLang (and sgl-kernel-npu for the NPU backend) is installed and importable"
    ),
}
_LEVEL = {
    "applied": "info",
    "disabled": "warning",
    "upstream-fixed": "info",
    "drifted": "error",
    "target-missing": "error",
}


@dataclass(frozen=True)
class Outcome:
    """What happened to one patch in this process."""

    name: str
    state: str
    target: str
    detail: str
    effect: str | None = None  # see the module docstring; None for patches that cannot tell

    @property
    def without_effect(self) -> bool:
        return self.state == "applied" and self.effect == "ignored"

    def as_dict(self) -> dict[str, str]:
        row = {
            "name": self.name,
            "state": self.state,
            "target": self.target,
            "detail": self.detail,
        }
        if self.effect is not None:
            row["effect"] = self.effect
        return row


#: name -> outcome, for this process.
OUTCOMES: dict[str, Outcome] = {}


class TargetMissing(Exception):
    """Raised by a patch's loader when the module or attribute it patches does not exist."""


_warned_unknown: set[str] = set()


def is_disabled(name: str) -> bool:
    names = disable_requests(os.environ)
    fresh = sorted(n for n in names - set(BY_NAME) - {"all"} if n not in _warned_unknown)
    if fresh:
        _warned_unknown.update(fresh)
        log(
            "warning",
            "patch.unknown_disable_name",
            names=",".join(fresh),
            known=",".join(BY_NAME),
            next=f"fix the spelling in {ENV_DISABLE} (chart value patches.disabled)",
        )
    return name in names or "all" in names


#: What to do when an applied patch reports that it changes nothing.
NEXT_WITHOUT_EFFECT = (
    "the collaborator this patch tunes no longer uses what it sets; check whether the failure it "
    "fixes is gone with this version (docs/patches.md), then drop or port the patch"
)


def record(info: PatchInfo, state: str, detail: str, effect: str | None = None) -> Outcome:
    """Keep, log and (when configured) persist one patch's outcome."""
    outcome = Outcome(info.name, state, info.target, detail, effect)
    OUTCOMES[info.name] = outcome
    fields: dict[str, object] = {"effect": effect} if effect is not None else {}
    log(
        "warning" if outcome.without_effect else _LEVEL.get(state, "warning"),
        "patch." + state.replace("-", "_"),
        patch=info.name,
        state=state,
        target=info.target,
        detail=detail,
        pid=os.getpid(),
        **fields,
        next=NEXT_WITHOUT_EFFECT if outcome.without_effect else NEXT_STEP.get(state),
    )
    state_file.write_patch_state(info.name, state, target=info.target, detail=detail, effect=effect)
    return outcome


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def source_fingerprint(func: Callable[..., Any]) -> str | None:
    """sha256 of the function's syntax tree (formatting, comments, docstrings ignored).

    None when the source is not available (a .pyc-only install); the signature check still runs.
    """
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    tree = _strip_docstrings(ast.parse(source))
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()


def parameter_names(func: Callable[..., Any]) -> tuple[str, ...] | None:
    try:
        return tuple(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return None


def shape_mismatch(
    func: Callable[..., Any], params: tuple[str, ...], fingerprint: str, what: str
) -> str | None:
    """None when ``func`` looks like the pinned release's, else a one-line explanation."""
    found = parameter_names(func)
    if found != params:
        return f"{what}: signature {found} differs from the pinned release's {params}"
    digest = source_fingerprint(func)
    if digest is not None and digest != fingerprint:
        return (
            f"{what}: source fingerprint {digest[:16]} differs from the pinned release's "
            f"{fingerprint[:16]}"
        )
    return None


@contextlib.contextmanager
def swapped(obj: object, **attrs: object) -> Iterator[None]:
    """Temporarily set attributes (a probe's stand-in collaborators), restoring them after."""
    missing = object()
    saved = {name: getattr(obj, name, missing) for name in attrs}
    try:
        for name, value in attrs.items():
            setattr(obj, name, value)
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                with contextlib.suppress(AttributeError):
                    delattr(obj, name)
            else:
                setattr(obj, name, value)


def run(
    info: PatchInfo,
    *,
    load: Callable[[], T],
    probe: Callable[[T], Probe],
    check: Callable[[T], str | None],
    rebind: Callable[[T], str],
    effect: Callable[[T], tuple[str, str]] | None = None,
) -> Outcome:
    """The procedure in the module docstring. Never raises: a failure becomes a state.

    ``effect(target) -> (effect, note)`` runs before the rebinding, on the original target.
    """
    if is_disabled(info.name):
        return record(info, "disabled", f"named in {ENV_DISABLE}")
    try:
        target = load()
    except TargetMissing as exc:
        return record(info, "target-missing", str(exc))
    except Exception as exc:  # an import error inside SGLang, say
        return record(info, "target-missing", f"{type(exc).__name__}: {exc}")
    try:
        verdict = probe(target)
        probe_note = ""
    except Exception as exc:
        verdict = None
        probe_note = f"; behaviour probe inconclusive ({type(exc).__name__}: {exc})"
    if verdict == "fixed":
        return record(info, "upstream-fixed", "the behaviour probe shows the fix in SGLang")
    mismatch = check(target)
    if mismatch is not None:
        return record(info, "drifted", mismatch + probe_note)
    effect_name, effect_note = None, ""
    if effect is not None:
        try:
            effect_name, note = effect(target)
            effect_note = f"; {note}"
        except Exception as exc:
            effect_name, effect_note = "unknown", f"; effect unknown ({type(exc).__name__}: {exc})"
    try:
        detail = rebind(target)
    except Exception as exc:
        return record(info, "drifted", f"rebinding failed: {type(exc).__name__}: {exc}")
    return record(info, "applied", detail + effect_note + probe_note, effect_name)


class Once(Generic[T]):
    """A patch's once-per-process guard: the first ``apply()`` runs the steps, later calls return
    that first outcome; ``forget()`` (under ``lock``, from a patch's ``revert()``) starts over."""

    def __init__(
        self,
        info: PatchInfo,
        *,
        load: Callable[[], T],
        probe: Callable[[T], Probe],
        check: Callable[[T], str | None],
        rebind: Callable[[T], str],
        effect: Callable[[T], tuple[str, str]] | None = None,
    ) -> None:
        self.info = info
        self.lock = threading.Lock()
        self._steps = (load, probe, check, rebind)
        self._effect = effect
        self._outcome: Outcome | None = None

    def apply(self) -> Outcome:
        load, probe, check, rebind = self._steps
        with self.lock:
            if self._outcome is None:
                self._outcome = run(
                    self.info,
                    load=load,
                    probe=probe,
                    check=check,
                    rebind=rebind,
                    effect=self._effect,
                )
            return self._outcome

    def forget(self) -> None:
        self._outcome = None
        OUTCOMES.pop(self.info.name, None)
