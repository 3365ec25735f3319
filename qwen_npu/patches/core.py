"""The decision every patch makes before it touches SGLang, and the record of what it decided.

Why this exists: every patch follows one procedure, so the states mean the same thing everywhere
(docs/architecture.md):

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

Each outcome is logged, kept in ``OUTCOMES`` (``qwen-npu patches verify``) and written to the
state file when ``QWEN_NPU_STATE_DIR`` is set.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any, Literal, TypeVar

from qwen_npu.log import PartLog
from qwen_npu.patches import modes
from qwen_npu.patches import state as state_file
from qwen_npu.patches.registry import BY_NAME, ENV_DISABLE, PatchInfo, disable_requests
from qwen_npu.upstream.source import fingerprint_in_source, read

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
_LEVEL = {"disabled": "warning", "drifted": "error", "target-missing": "error"}  # else info


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
        return {k: v for k, v in asdict(self).items() if v is not None}


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
    level = "warning" if outcome.without_effect else _LEVEL.get(state, "info")
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


def source_fingerprint(func: Callable[..., Any]) -> str | None:
    """The fingerprint of a function's code (formatting, comments and docstrings do not count),
    read from the file it was compiled from and located by its qualified name, so it is the same
    on every Python version. None without Python source (a .pyc-only install, a builtin)."""
    func = inspect.unwrap(func)
    code = getattr(func, "__code__", None)
    qualname = getattr(func, "__qualname__", None)
    source = read(code.co_filename) if code is not None else None
    if source is None or not isinstance(qualname, str):
        return None
    return fingerprint_in_source(source, qualname, code.co_firstlineno)  # type: ignore[union-attr]


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


def parameter_names(func: Callable[..., Any]) -> tuple[str, ...] | None:
    try:
        return tuple(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return None


def pin_mismatch(pin: Pin, func: Callable[..., Any]) -> str | None:
    """None when ``func`` has the pinned shape, else a one-line explanation."""
    found = parameter_names(func)
    if found != pin.params:
        return f"{pin.what}: signature {found} differs from the pinned release's {pin.params}"
    digest = source_fingerprint(func)
    if digest is not None and digest != pin.fingerprint:
        return (
            f"{pin.what}: source fingerprint {digest[:16]} differs from the pinned release's "
            f"{pin.fingerprint[:16]}"
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


class Once:
    """A patch's once-per-process guard over ``run``'s steps: the first ``apply()`` runs them,
    later calls return that first outcome. ``rebind`` (from the patch's rebind step) remembers
    what it replaced, for ``active()`` and ``revert()`` (tests, debugging), which starts over."""

    def __init__(self, info: PatchInfo, **steps: Any) -> None:
        self.info = info
        self.lock = threading.Lock()
        self.steps = steps
        self._outcome: Outcome | None = None
        self._bound: list[tuple[Any, str, Any, Any]] = []  # (owner, name, original, ours)

    def apply(self) -> Outcome:
        with self.lock:
            if self._outcome is None:
                self._outcome = run(self.info, **self.steps)
            return self._outcome

    def behaviour(self) -> Probe:
        """The behaviour probe alone, on the target as it loads now, recording nothing
        (``make sglang-candidate`` reports it beside the state); raises what they raise."""
        result: Probe = self.steps["probe"](self.steps["load"]())
        return result

    def rebind(self, owner: Any, name: str, ours: Any) -> Any:
        """``owner.name = ours``; returns what it was."""
        original = getattr(owner, name)
        setattr(owner, name, ours)
        self._bound.append((owner, name, original, ours))
        return original

    def active(self) -> bool:
        """Whether everything this patch rebound still points at its replacement."""
        return bool(self._bound) and all(
            getattr(o, n, None) is ours for o, n, _, ours in self._bound
        )

    def revert(self) -> None:
        """Put back what ``rebind`` replaced and forget the outcome."""
        with self.lock:
            for owner, name, original, ours in reversed(self._bound):
                if getattr(owner, name, None) is ours:
                    setattr(owner, name, original)
            self._bound.clear()
            self._outcome = None
            OUTCOMES.pop(self.info.name, None)


def loaded(name: str) -> ModuleType:
    """The imported module ``name``; TargetMissing while it is not imported."""
    module = sys.modules.get(name)
    if module is None:
        raise TargetMissing(f"{name} is not imported")
    return module
