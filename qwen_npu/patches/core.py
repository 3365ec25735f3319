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
import copy
import hashlib
import inspect
import json
import os
import threading
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from qwen_npu.log import PartLog
from qwen_npu.patches import modes
from qwen_npu.patches import state as state_file
from qwen_npu.patches.registry import BY_NAME, ENV_DISABLE, PatchInfo, disable_requests

log = PartLog("patches")

T = TypeVar("T")
Probe = Literal["fixed", "needed"] | None

#: What to do next, per state, for the log line and ``qwen-npu patches explain``.
NEXT_STEP: dict[str, str] = {
    "applied": "nothing; remove the patch once the upstream fix ships (qwen-npu patches explain)",
    "disabled": f"unset {ENV_DISABLE} (or drop this name from it) to apply the patch again",
    "upstream-fixed": "nothing; the installed SGLang no longer needs this patch, drop it",
    "drifted": (
        "the installed SGLang differs from the release this patch was written for; pin "
        "SGLANG_VERSION in docker/versions.env back, or port the patch and its fingerprint "
        "(make sglang-candidate CANDIDATE=<x> says what changed)"
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
    mode = modes.current()
    used = None if mode is None else modes.uses(info, mode)
    fields: dict[str, object] = {"effect": effect} if effect is not None else {}
    level = "warning" if outcome.without_effect else _LEVEL.get(state, "warning")
    nxt = NEXT_WITHOUT_EFFECT if outcome.without_effect else NEXT_STEP.get(state)
    if used is False:
        # The engine's mode does not run the code this patch fixes (modes): a problem with it is
        # a warning, not an error, and says so.
        fields["used_by_mode"] = False
        if level == "error":
            level = "warning"
            nxt = f"{nxt}; this mode ({mode.describe() if mode else ''}) does not use the patch"
    log(
        level,
        "patch." + state.replace("-", "_"),
        patch=info.name,
        state=state,
        target=info.target,
        detail=detail,
        pid=os.getpid(),
        **fields,
        next=nxt,
    )
    state_file.write_patch_state(
        info.name, state, target=info.target, detail=detail, effect=effect, used_by_mode=used
    )
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


def _canonical(node: object) -> object:
    """The syntax tree as plain lists, the same on every Python the engine runs (3.10-3.13).

    ``ast.dump`` is not: 3.12 adds ``type_params=[]`` to every function and class, 3.13 stops
    printing empty fields. Here a field that is None or an empty list is left out on every version,
    so a node type gaining an optional field changes nothing; positions are never included.
    """
    if isinstance(node, ast.AST):
        fields = []
        for name in node._fields:
            value = getattr(node, name, None)
            if value is None or (isinstance(value, list) and not value):
                continue
            fields.append([name, _canonical(value)])
        return [type(node).__name__, fields]
    if isinstance(node, list):
        return [_canonical(item) for item in node]
    return [type(node).__name__, repr(node)]


def tree_fingerprint(node: ast.AST) -> str:
    """sha256 of a function's (or any node's) canonical tree, docstrings left out."""
    tree = _strip_docstrings(copy.deepcopy(node))
    text = json.dumps(_canonical(tree), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _first_line(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def find_function(
    tree: ast.AST, qualname: str, first_line: int | None = None
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The ``def`` whose qualified name is ``qualname`` (``Class.method``, ``f.<locals>.g``).

    Where one name is defined more than once (``if``/``else`` variants), ``first_line`` (the code
    object's ``co_firstlineno``) picks the one the running code came from.
    """
    found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                if name == qualname:
                    found.append(child)
                visit(child, name + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    if len(found) > 1 and first_line is not None:
        found = [f for f in found if _first_line(f) == first_line] or found
    return found[0] if found else None


def fingerprint_in_source(source: str, qualname: str, first_line: int | None = None) -> str | None:
    """The fingerprint of ``qualname`` as defined in a module's source text (None: not there)."""
    try:
        node = find_function(ast.parse(source), qualname, first_line)
    except SyntaxError:
        return None
    return None if node is None else tree_fingerprint(node)


def fingerprint_in_file(path: str | os.PathLike[str], qualname: str) -> str | None:
    """``fingerprint_in_source`` of a file, read as Python reads it (its encoding cookie)."""
    try:
        with tokenize.open(path) as handle:
            source = handle.read()
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    return fingerprint_in_source(source, qualname)


def source_fingerprint(func: Callable[..., Any]) -> str | None:
    """The fingerprint of a function's code: formatting, comments and docstrings do not count.

    Read from the file the function was compiled from (``co_filename``), located by its qualified
    name, so it does not depend on ``inspect``'s line heuristics and is the same value on every
    Python version (``_canonical``). None when there is no Python source (a .pyc-only install, a
    builtin); the signature check still runs.
    """
    func = inspect.unwrap(func)
    code = getattr(func, "__code__", None)
    qualname = getattr(func, "__qualname__", None)
    if code is None or not isinstance(qualname, str):
        return None
    try:
        with tokenize.open(code.co_filename) as handle:
            source = handle.read()
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    return fingerprint_in_source(source, qualname, code.co_firstlineno)


@dataclass(frozen=True)
class Pin:
    """What one target looked like in the pinned SGLang release: the drift guard's reference.

    Every patch module lists its pins in ``PINS``; the guard (``pin_mismatch``) and the tests that
    run it on each Python version read them from there.
    """

    module: str  # the module that defines the target
    qualname: str  # ``function`` or ``Class.method``
    params: tuple[str, ...]
    fingerprint: str  # source_fingerprint() of the release's code

    @property
    def what(self) -> str:
        return self.qualname if "." in self.qualname else f"{self.module}.{self.qualname}"


def pin_mismatch(pin: Pin, func: Callable[..., Any]) -> str | None:
    """None when ``func`` has the pinned shape, else a one-line explanation."""
    return shape_mismatch(func, pin.params, pin.fingerprint, pin.what)


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

    def behaviour(self) -> Probe:
        """The behaviour probe alone, on the target as it loads now, recording nothing
        (``make sglang-candidate`` reports it beside the state); raises what they raise."""
        load, probe, _, _ = self._steps
        return probe(load())

    def forget(self) -> None:
        self._outcome = None
        OUTCOMES.pop(self.info.name, None)
