"""``qwen-npu patches verify --build``: what a build host without an NPU can prove.

Why this exists: the engine image is built on a host with the CANN toolkit and torch_npu but no
NPU. There ``import torch`` loads torch_npu (torch's device-backend entry point), and SGLang's
``is_npu()`` raises when torch_npu is loaded without a device, so the full ``verify``, which
imports SGLang's target modules, cannot pass at build time (issue 22). This check imports no
SGLang, torch or torch_npu code: it reads the installed sources, which is where the drift guard's
evidence lives anyway. It proves, per patch:

- ``target-missing``: the target module's source file is not found, or the pinned ``def`` is not in
  it;
- ``drifted``: a pinned ``def``'s ``core.tree_fingerprint`` differs from the pin;
- ``pinned``: every pinned ``def`` is there with the pinned fingerprint;

and, for the scatter patch, that the kernel it tunes still tiles by ``h_block_size``
(``kernel_tiling`` on sgl-kernel-npu's source); and that the ``.pth`` start-up hook loads in a fresh
interpreter of this environment. What it cannot prove (the behaviour probes, the rebinding, the
effect on a live NPU) the full ``verify --strict`` proves at engine start (the image entrypoint).

``site`` (``--site DIR``) reads the sources from another environment's site-packages: the cpu
flavour of the image runs this check on the engine's Python version against its stand-in stack.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_npu.constants import UNKNOWN
from qwen_npu.patches import core, kernel_tiling
from qwen_npu.patches.hook import ENV_HOOK
from qwen_npu.patches.registry import PATCHES, PatchInfo

BUILD_OK = "pinned"


@dataclass(frozen=True)
class SourcePin:
    """One ``def`` a patch's drift guard pins: where it lives and its fingerprint."""

    module: str
    qualname: str
    fingerprint: str


def _pins_of(info: PatchInfo, patch: Any) -> tuple[list[SourcePin], tuple[str, str] | None] | None:
    """The patch's pinned defs (its ``PINS``) and the (module, name) of a kernel whose tiling it
    relies on (its ``TUNED_KERNEL``, if any). None: the patch declares no pins.
    """
    pins = getattr(patch, "PINS", None)
    if not pins:
        return None
    rows = [SourcePin(pin.module, pin.qualname, pin.fingerprint) for pin in pins]
    return rows, getattr(patch, "TUNED_KERNEL", None)


def module_source(name: str, search: list[str] | None = None) -> Path | None:
    """The ``.py`` file of module ``name`` found on ``search`` (default ``sys.path``), unimported.

    Looked up the way the path finder does, in the file system only (packages, namespace
    packages, modules), so no ``__init__`` runs and nothing lands in ``sys.modules``.
    """
    dirs = [Path(d or ".") for d in (sys.path if search is None else search)]
    *packages, leaf = name.split(".")
    for part in packages:
        regular = [d / part for d in dirs if (d / part / "__init__.py").is_file()]
        dirs = regular[:1] or [d / part for d in dirs if (d / part).is_dir()]
        if not dirs:
            return None
    for d in dirs:
        for candidate in (d / leaf / "__init__.py", d / f"{leaf}.py"):
            if candidate.is_file():
                return candidate
    return None


def _read(path: Path) -> str | None:
    try:
        with tokenize.open(path) as handle:
            return handle.read()
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def _imported_from(source: str, name: str, importer: str) -> str | None:
    """The module ``importer``'s source takes ``name`` from (``from X import name``)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names):
            if node.level == 0:
                return node.module
            base = importer.split(".")[: -node.level]
            return ".".join([*base, node.module] if node.module else base)
    return None


def _kernel_tiling(module: str, kernel: str, search: list[str] | None) -> tuple[str, str]:
    path = module_source(module, search)
    source = _read(path) if path else None
    if source is None:
        return UNKNOWN, f"no source for {module}"
    try:
        home = _imported_from(source, kernel, module) or module
    except SyntaxError as exc:
        return UNKNOWN, f"{path} does not parse: {exc.msg}"
    kernel_path = module_source(home, search)
    kernel_source = _read(kernel_path) if kernel_path else None
    if kernel_source is None:
        return UNKNOWN, f"no source for {home} (where {module} takes {kernel})"
    try:
        tiling = kernel_tiling.analyse_source(kernel_source, kernel)
    except SyntaxError as exc:
        return UNKNOWN, f"{kernel_path} does not parse: {exc.msg}"
    return tiling.verdict, f"{home}.{kernel}: {tiling.reason}"


def check_patch(info: PatchInfo, search: list[str] | None = None) -> dict[str, Any]:
    """One row: name, state (pinned, drifted, target-missing, unchecked), detail, effect."""
    patch = importlib.import_module(info.module)
    found = _pins_of(info, patch)
    row: dict[str, Any] = {"name": info.name, "target": info.target}
    if found is None:
        return row | {
            "state": "unchecked",
            "detail": f"{info.module} declares no PINS (core.Pin) for the build check",
        }
    pins, kernel = found
    seen: list[str] = []
    for pin in pins:
        path = module_source(pin.module, search)
        source = _read(path) if path else None
        if source is None:
            return row | {"state": "target-missing", "detail": f"no source for {pin.module}"}
        actual = core.fingerprint_in_source(source, pin.qualname)
        if actual is None:
            detail = f"{pin.qualname} is not defined in {path}"
            return row | {"state": "target-missing", "detail": detail}
        if actual != pin.fingerprint:
            detail = (
                f"{pin.qualname} in {path}: fingerprint {actual[:12]}..., "
                f"pinned {pin.fingerprint[:12]}..."
            )
            return row | {"state": "drifted", "detail": detail}
        seen.append(pin.qualname)
    row |= {"state": BUILD_OK, "detail": "source as pinned: " + ", ".join(seen)}
    if kernel is not None:
        row["effect"], row["effect_detail"] = _kernel_tiling(*kernel, search)
    return row


def pth_hook_loads(python: str | None = None) -> tuple[bool, str]:
    """Does a fresh interpreter of this environment install the start-up hook by itself?"""
    env = {k: v for k, v in os.environ.items() if k != ENV_HOOK}
    code = (
        "import sys\n"
        "hook = sys.modules.get('qwen_npu.patches.hook')\n"
        "print(getattr(hook, '__file__', ''))\n"
        "sys.exit(0 if hook is not None and hook.installed() else 3)\n"
    )
    try:
        done = subprocess.run(
            [python or sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"cannot run {python or sys.executable}: {exc}"
    if done.returncode == 0:
        return True, f"loaded at start-up from {done.stdout.strip()}"
    return False, (
        f"{python or sys.executable} starts without the hook (qwen_npu_patches.pth missing from "
        "its site-packages?); the patches would never load in the engine's processes"
    )


#: The GDN contract's links read from source alone (pool_layout builds SGLang's pool: start only).
GDN_READABLE = ("prefill_op", "verify_op", "mover", "decode_kernel")
#: The links that read sgl-kernel-npu's own files: in the NPU image (``--npu``) the real package is
#: there, so a file it cannot read is a wrong or changed kernel, and fails the build.
KERNEL_LINKS = ("mover", "decode_kernel")


def gdn_readable(
    site: str | None = None, *, npu: bool = False, decode_patch: str | None = None
) -> dict[str, dict[str, str]]:
    """The source-read links of the GDN state contract (``gdn_contract``). Without ``npu`` the
    pool is unknown (it needs SGLang imported); with it, the kernel links are read against the
    pool SGLang 0.5.23 allocates (contiguous, V-major: ``pool_layout`` proves it at engine start),
    and ``decode_patch`` (the decode patch's build state) stands for its start-up state."""
    try:  # lazy, inside the try: whatever its import raises must not stop the build's report
        from qwen_npu.patches import gdn_contract, kernel_layout

        sources = gdn_contract.Sources(build_pool=None, decode_patch=decode_patch)
        if site is not None:
            sources.sglang_dir = Path(site) / "sglang"
            sources.kernel_dir = Path(site) / "sgl_kernel_npu"
        pool = gdn_contract.Pool(kernel_layout.V_MAJOR, True) if npu else None
        readers = {name: getattr(gdn_contract, name) for name in GDN_READABLE}
        found = {name: read(sources, pool).as_dict() for name, read in readers.items()}
        if npu:
            for name in KERNEL_LINKS:
                if found[name]["verdict"] == "unknown":
                    found[name] = {
                        "verdict": "fail",
                        "evidence": f"unreadable in the NPU image: {found[name]['evidence']}",
                    }
        return found
    except Exception as exc:  # the contract module changes under its owner: say so, do not stop
        why = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        return {
            name: {"verdict": "unknown", "evidence": f"not read: {why}"} for name in GDN_READABLE
        }


def build_check(site: str | None = None, *, npu: bool = False) -> dict[str, Any]:
    """Every patch's row, the hook check and the readable GDN links; ``ok`` when all hold.
    ``npu``: the NPU image's build (the real sgl-kernel-npu installed; ``gdn_readable``)."""
    search = None if site is None else [site]
    rows = [check_patch(info, search) for info in PATCHES]
    hook_ok, hook_detail = pth_hook_loads()
    decode = next(r for r in rows if r["name"] == "gdn-decode-state-layout")
    gdn = gdn_readable(
        site, npu=npu, decode_patch="applied" if decode["state"] == BUILD_OK else decode["state"]
    )
    ok = (
        hook_ok
        and all(r["state"] == BUILD_OK and r.get("effect") != kernel_tiling.IGNORED for r in rows)
        and all(v["verdict"] != "fail" for v in gdn.values())
    )
    return {
        "ok": ok,
        "mode": "build",
        "npu": npu,
        "python": ".".join(map(str, sys.version_info[:3])),
        "site": site,
        "patches": rows,
        "pth_hook": {"ok": hook_ok, "detail": hook_detail},
        "gdn_contract": gdn,
    }


#: What to do next for each build-check state (the stderr lines of ``verify --build``).
NEXT_STEP = {
    "drifted": core.NEXT_STEP["drifted"],
    "target-missing": (
        "check that SGLang (and sgl-kernel-npu) is installed in this environment, or pass --site"
    ),
    "unchecked": "list the patch's core.Pin rows in its module's PINS (the drift guard's too)",
}
