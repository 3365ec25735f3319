"""Post-import hooks: apply each patch the moment SGLang has imported what the patch targets.

Why this exists: the patches must load in every Python process of the engine, including the
scheduler processes SGLang spawns, which share nothing with the launcher but the interpreter's
start-up. ``qwen_npu_patches.pth`` imports this module at start-up; it puts one finder at the front
of ``sys.meta_path`` that ignores every import outside ``TRIGGER_PACKAGES`` and every module no
patch waits for (the registry's triggers, read at the first import inside SGLang). When one
finishes executing, every patch whose trigger modules are all loaded is imported and applied, so
``python -c pass`` pays for this module only (``sys`` and ``os``). ``QWEN_NPU_PATCHES_HOOK=0``
keeps the finder out (nothing is patched; a debugging aid).
"""

import os
import sys

# Names for the type checker only: importing typing at interpreter start costs milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

#: The top-level packages the trigger modules live in; ``TRIGGERS``: patch module -> the modules
#: that must all be loaded before it applies.
TRIGGER_PACKAGES: frozenset[str] = frozenset({"sglang"})
ENV_HOOK = "QWEN_NPU_PATCHES_HOOK"

_loaded: set[str] = set()
_started: set[str] = set()


def _is_loaded(name: str) -> bool:
    if name in _loaded:
        return True
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    return module is not None and not getattr(spec, "_initializing", False)


def _triggers() -> "dict[str, tuple[str, ...]]":
    """``TRIGGERS``: read from the registry once, when first needed (a test may set it)."""
    table: dict[str, tuple[str, ...]] | None = globals().get("TRIGGERS")
    if table is None:
        # lazy: the registry (dataclasses) loads only once SGLang itself is being imported
        from qwen_npu.patches.registry import PATCHES

        table = {p.module: p.triggers for p in PATCHES}
        globals()["TRIGGERS"] = table
    return table


def __getattr__(name: str) -> "Any":
    if name == "TRIGGERS":
        return _triggers()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _watched(name: str) -> bool:
    if name.partition(".")[0] not in TRIGGER_PACKAGES:
        return False
    return any(name in modules for modules in _triggers().values())


def _module_loaded(name: str) -> None:
    """A watched module finished executing: apply every patch that was waiting only for it."""
    _loaded.add(name)
    for patch_module, modules in _triggers().items():
        if name in modules and patch_module not in _started and all(map(_is_loaded, modules)):
            _started.add(patch_module)
            try:
                __import__(patch_module)
                sys.modules[patch_module].apply()
            except Exception as exc:  # never break SGLang's import because of a patch
                # logging only now: the hook imports nothing at start-up
                from qwen_npu.log import PartLog

                PartLog("patches")(
                    "error",
                    "patch.hook_failed",
                    module=patch_module,
                    error=f"{type(exc).__name__}: {exc}",
                    next="run qwen-npu patches verify",
                )


class _LoaderProxy:
    """Runs the real loader, then the hook; every other attribute is the real loader's."""

    def __init__(self, loader: "Any", name: str) -> None:
        self._loader = loader
        self._name = name

    def __getattr__(self, attr: str) -> "Any":
        return getattr(self._loader, attr)

    def create_module(self, spec: "Any") -> "ModuleType | None":
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: "ModuleType") -> None:
        # Hand the module its real loader back before running it (inspect, pkgutil, reload).
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        _module_loaded(self._name)


class PostImportFinder:
    """A meta-path finder that only ever answers for the watched module names."""

    def find_spec(self, fullname: str, path: "Any" = None, target: "Any" = None) -> "Any":
        if fullname in _loaded or not _watched(fullname):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _LoaderProxy(spec.loader, fullname)  # type: ignore[assignment]
                return spec
        return None


_finder: "PostImportFinder | None" = None


def install() -> bool:
    """Put the finder on ``sys.meta_path`` (once) and apply patches whose targets are loaded.

    Returns False when ``QWEN_NPU_PATCHES_HOOK=0`` keeps it out.
    """
    global _finder
    if os.environ.get(ENV_HOOK, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if _finder is None:
        _finder = PostImportFinder()
        sys.meta_path.insert(0, _finder)
    for name in sorted(n for n in list(sys.modules) if _watched(n)):
        if _is_loaded(name):
            _module_loaded(name)
    return True


def installed() -> bool:
    return _finder is not None and _finder in sys.meta_path
