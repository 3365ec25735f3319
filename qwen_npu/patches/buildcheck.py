"""``qwen-npu patches verify --build``: what a build host without an NPU can prove.

Why this exists: the image is built where torch_npu is installed and no NPU is, and SGLang's
``is_npu()`` raises there, so the full ``verify`` cannot run (issue 22). This check imports no
SGLang, torch or torch_npu: from the installed sources it proves each pinned ``def`` is there
(else ``target-missing``) with its pinned fingerprint (else ``drifted``; all: ``pinned``), that
the kernel the scatter patch tunes still tiles by ``h_block_size``, the GDN contract links that
source alone can tell, and that the ``.pth`` hook loads in a fresh interpreter. The rest (probes,
rebinding, the NPU) ``verify --strict`` proves at engine start. ``--site DIR`` reads another
environment's site-packages (the cpu image flavour's stand-in stack).
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from qwen_npu.constants import UNKNOWN
from qwen_npu.patches import core, gdn_contract
from qwen_npu.patches.hook import ENV_HOOK
from qwen_npu.patches.registry import PATCHES, PatchInfo
from qwen_npu.upstream import kernels, source

BUILD_OK = "pinned"


def _kernel_tiling(module: str, kernel: str, search: list[str] | None) -> tuple[str, str]:
    """The tiling verdict of ``kernel`` as ``module`` imports it (``from X import kernel``)."""
    text = source.read(source.find_module(module, search))
    if text is None:
        return UNKNOWN, f"no source for {module}"
    try:
        home = source.imported_from(ast.parse(text), kernel, module) or module
    except SyntaxError as exc:
        return UNKNOWN, f"{module} does not parse: {exc.msg}"
    kernel_source = source.read(source.find_module(home, search))
    if kernel_source is None:
        return UNKNOWN, f"no source for {home} (where {module} takes {kernel})"
    tiling = kernels.tiling(kernel_source, kernel)
    return tiling.verdict, f"{home}.{kernel}: {tiling.reason}"


def check_patch(info: PatchInfo, search: list[str] | None = None) -> dict[str, Any]:
    """One row: name, state (pinned, drifted, target-missing, unchecked), detail, effect."""
    patch = importlib.import_module(info.module)
    row: dict[str, Any] = {"name": info.name, "target": info.target}
    pins = getattr(patch, "PINS", ())
    if not pins:
        detail = f"{info.module} declares no PINS (core.Pin) for the build check"
        return row | {"state": "unchecked", "detail": detail}
    for pin in pins:
        path = source.find_module(pin.module, search)
        text = source.read(path)
        if text is None:
            return row | {"state": "target-missing", "detail": f"no source for {pin.module}"}
        actual = source.fingerprint_in_source(text, pin.qualname)
        if actual is None:
            detail = f"{pin.qualname} is not defined in {path}"
            return row | {"state": "target-missing", "detail": detail}
        if actual != pin.fingerprint:
            detail = (
                f"{pin.qualname} in {path}: fingerprint {actual[:12]}..., "
                f"pinned {pin.fingerprint[:12]}..."
            )
            return row | {"state": "drifted", "detail": detail}
    row |= {"state": BUILD_OK, "detail": "source as pinned: " + ", ".join(p.qualname for p in pins)}
    if hasattr(patch, "TUNED_KERNEL"):
        module, kernel = patch.TUNED_KERNEL
        row["effect"], row["effect_detail"] = _kernel_tiling(module, kernel, search)
    return row


def pth_hook_loads() -> tuple[bool, str]:
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
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"cannot run {sys.executable}: {exc}"
    if done.returncode == 0:
        return True, f"loaded at start-up from {done.stdout.strip()}"
    return False, (
        f"{sys.executable} starts without the hook (qwen_npu_patches.pth missing from "
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
    try:
        sources = gdn_contract.Sources(build_pool=None, decode_patch=decode_patch)
        if site is not None:
            sources.sglang_dir = Path(site) / "sglang"
            sources.kernel_dir = Path(site) / "sgl_kernel_npu"
        pool = gdn_contract.Pool(kernels.V_MAJOR, True) if npu else None
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
    except Exception as exc:  # a reader's bug must not stop the build's report
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
        and all(r["state"] == BUILD_OK and r.get("effect") != kernels.IGNORED for r in rows)
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
