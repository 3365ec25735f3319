"""Does the installed sgl-kernel-npu hold what SGLang's Qwen3.5/3.6 path imports and calls?

Why this exists: sgl-kernel-npu comes from a release zip chosen by version, torch, Python, CANN,
chip and CPU; a wrong asset or a release before PR #740 builds fine and fails at the first model
load. Without an NPU (the image build): the list is SGLang's own, read from its source
(``upstream.source``): every module-level ``from sgl_kernel_npu... import`` of ``PATH_FILES``
(ImportError-guarded ones skipped, as SGLang skips them) and every ``torch.ops.npu.<op>(...)`` of
``GDN_BACKEND`` with its keywords; each module must be a file of the kernel package (``--site``, or
the wheels inside a release zip, ``--zip``) defining the names, each op's compiled TORCH_LIBRARY
schema must exist and name every keyword. At engine start (``--registered``, the one mode that
imports torch) the ops are looked up in ``torch.ops.npu`` after importing what SGLang imports
before it calls them (a release may register an op on a submodule's import, #747). Output: one
log line on stdout, details on stderr; exit 0, 1 (something missing), 2 (bad input).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import io
import re
import sys
import sysconfig
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from qwen_npu.log import line
from qwen_npu.upstream import source

PART = "hardware"
KERNEL_PACKAGE = "sgl_kernel_npu"
#: The SGLang files on the Qwen3.5/3.6 Ascend path whose module-level sgl_kernel_npu imports run
#: when the model loads (models/qwen3_5.py, the GDN backends and kernels).
PATH_FILES = (
    "sglang/srt/models/qwen3_5.py",
    "sglang/srt/layers/attention/linear/gdn_backend.py",
    "sglang/srt/layers/attention/linear/kernels/gdn_triton.py",
    "sglang/srt/hardware_backend/npu/attention/ascend_gdn_backend.py",
    "sglang/srt/hardware_backend/npu/attention/ascend_hybrid_linear_attn_backend.py",
)
#: The file whose ``torch.ops.npu.<op>(...)`` calls are the GDN path's AscendC ops.
GDN_BACKEND = "sglang/srt/hardware_backend/npu/attention/ascend_gdn_backend.py"
#: The packages of the release zip's wheels whose compiled libraries may register the ops.
LIBRARY_PACKAGES = ("sgl_kernel_npu", "attentions")


@dataclass(frozen=True)
class Need:
    """One thing SGLang needs: a module and the names it imports from it."""

    module: str
    names: tuple[str, ...]
    source: str  # the SGLang file and line


@dataclass(frozen=True)
class OpCall:
    name: str
    keywords: tuple[str, ...]
    source: str


@dataclass
class Verdict:
    missing: list[str] = field(default_factory=list)
    checked: int = 0
    libraries: list[str] = field(default_factory=list)  # the compiled libraries searched


class InputError(Exception):
    """Bad input: a path that is not there, a file that is not what it should be."""


# ------------------------------------------------------------------------- what SGLang needs


def sglang_needs(sglang_root: Path) -> list[Need]:
    """The sgl_kernel_npu modules and names PATH_FILES import at module level."""
    needs = []
    for rel in PATH_FILES:
        for stmt in source.module_level(_parse(sglang_root / rel).body):
            at = f"{rel}:{stmt.lineno}"
            if isinstance(stmt, ast.ImportFrom) and stmt.module:
                if stmt.module.partition(".")[0] == KERNEL_PACKAGE:
                    names = tuple(a.name for a in stmt.names if a.name != "*")
                    needs.append(Need(stmt.module, names, at))
            elif isinstance(stmt, ast.Import):
                kernel = [a.name for a in stmt.names if a.name.partition(".")[0] == KERNEL_PACKAGE]
                needs += [Need(name, (), at) for name in kernel]
    return needs


def sglang_op_calls(sglang_root: Path) -> list[OpCall]:
    """Every ``torch.ops.npu.<op>(...)`` call of the GDN backend, with its keywords."""
    calls: dict[str, OpCall] = {}
    for callee, node in source.calls(_parse(sglang_root / GDN_BACKEND)):
        prefix, _, op = callee.rpartition(".")
        if prefix != "torch.ops.npu":
            continue
        seen = calls.get(op)
        keywords = {k.arg for k in node.keywords if k.arg} | set(seen.keywords if seen else ())
        where = seen.source if seen else f"{GDN_BACKEND}:{node.lineno}"
        calls[op] = OpCall(op, tuple(sorted(keywords)), where)
    return list(calls.values())


def _parse(path: Path) -> ast.Module:
    tree = source.parse(path)
    if isinstance(tree, str):
        raise InputError(f"{path}: {tree}; is SGLang installed there (--site)?")
    return tree


# ----------------------------------------------------------------------- what the kernel holds


class KernelFiles:
    """The kernel packages' files, by path relative to site-packages (``sgl_kernel_npu/x.py``)."""

    def __init__(self, files: dict[str, bytes | Path]) -> None:
        self._files = files

    @classmethod
    def from_site(cls, site: Path) -> KernelFiles:
        if not (site / KERNEL_PACKAGE).is_dir():
            return cls({})
        paths = (p for package in LIBRARY_PACKAGES for p in (site / package).rglob("*"))
        return cls({p.relative_to(site).as_posix(): p for p in paths if p.suffix in (".py", ".so")})

    @classmethod
    def from_zip(cls, zip_path: Path) -> KernelFiles:
        """The files of every wheel inside a release zip (read in memory, nothing installed)."""
        files: dict[str, bytes | Path] = {}
        try:
            outer = zipfile.ZipFile(zip_path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise InputError(f"{zip_path}: not a readable zip ({exc})") from exc
        with outer:
            wheels = [n for n in outer.namelist() if n.endswith(".whl")]
            if not wheels:
                raise InputError(
                    f"{zip_path}: holds no wheel; is it the sgl-kernel-npu release zip?"
                )
            for name in wheels:
                with zipfile.ZipFile(io.BytesIO(outer.read(name))) as wheel:
                    for member in wheel.namelist():
                        top = PurePosixPath(member).parts[0]
                        if top in LIBRARY_PACKAGES and member.endswith((".py", ".so")):
                            files[member] = wheel.read(member)
        return cls(files)

    def read(self, rel: str) -> bytes:
        item = self._files[rel]
        return item.read_bytes() if isinstance(item, Path) else item

    def module_file(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for rel in (f"{base}.py", f"{base}/__init__.py"):
            if rel in self._files:
                return rel
        prefix = base + "."
        return next((r for r in self._files if r.startswith(prefix) and r.endswith(".so")), None)

    def libraries(self) -> list[str]:
        return sorted(r for r in self._files if r.endswith(".so"))

    def __bool__(self) -> bool:
        return bool(self._files)


def _schema_pattern(op: str) -> re.Pattern[bytes]:
    return re.compile(
        rb"(?<![A-Za-z0-9_])"
        + re.escape(op.encode())
        + rb"\(((?:[^()\x00]|\([^()\x00]*\))*)\)\s*->"
    )


def _args_of(schema: bytes) -> list[str]:
    names = []
    for arg in schema.decode(errors="replace").split(","):
        arg = arg.split("=", 1)[0].strip()
        if arg and arg != "*":
            names.append(arg.split()[-1])
    return names


def op_schemas(libraries: Iterable[bytes], ops: Sequence[str]) -> dict[str, list[str]]:
    """The argument names of each op's TORCH_LIBRARY schema as compiled in (absent ops left out).
    Each library is searched once, so one large ``.so`` at a time is in memory."""
    found: dict[str, list[str]] = {}
    patterns = {op: _schema_pattern(op) for op in ops}
    for data in libraries:
        for op, pattern in patterns.items():
            if op not in found and (match := pattern.search(data)) is not None:
                found[op] = _args_of(match.group(1))
        del data
    return found


def check(sglang_root: Path, kernel: KernelFiles) -> Verdict:
    verdict = Verdict(libraries=kernel.libraries())
    if not kernel:
        verdict.missing.append(f"the {KERNEL_PACKAGE} package itself (no {KERNEL_PACKAGE}/ found)")
        return verdict
    for need in sglang_needs(sglang_root):
        verdict.checked += 1
        rel = kernel.module_file(need.module)
        if rel is None:
            verdict.missing.append(f"module {need.module} (imported by SGLang at {need.source})")
            continue
        if not rel.endswith(".py") or not need.names:
            continue
        defined, open_ended = source.defined_names(ast.parse(kernel.read(rel)))
        absent = [n for n in need.names if n not in defined]
        if absent and not open_ended:
            verdict.missing.append(
                f"{need.module}.{','.join(absent)} (imported by SGLang at {need.source})"
            )
    calls = sglang_op_calls(sglang_root)
    schemas = op_schemas((kernel.read(rel) for rel in kernel.libraries()), [c.name for c in calls])
    for call in calls:
        verdict.checked += 1
        args = schemas.get(call.name)
        if args is None:
            verdict.missing.append(
                f"op torch.ops.npu.{call.name} (called at {call.source}): no schema in "
                f"{', '.join(kernel.libraries()) or 'any compiled library of the kernel package'}"
            )
            continue
        absent = [k for k in call.keywords if k not in args]
        if absent:
            verdict.missing.append(
                f"op torch.ops.npu.{call.name} argument(s) {','.join(absent)} (passed at "
                f"{call.source}; the compiled schema has {','.join(args)})"
            )
    return verdict


# -------------------------------------------------------------------- registered at engine start


class ImportFailed(Exception):
    """A module SGLang imports on the path does not import here (names it)."""

    def __init__(self, module: str, error: BaseException) -> None:
        super().__init__(f"{module}: {type(error).__name__}: {error}")
        self.module = module


def loaded_libraries(maps: Path = Path("/proc/self/maps")) -> list[str]:
    """The compiled libraries of the kernel packages this process has mapped (``pkg/.../x.so``,
    from the package directory on), whatever loaded them (an extension module, ctypes,
    ``torch.ops.load_library``); [] where the maps cannot be read."""
    try:
        text = maps.read_text()
    except OSError:
        return []
    found: set[str] = set()
    for row in text.splitlines():
        fields = row.split(maxsplit=5)  # address perms offset device inode [path]
        if len(fields) < 6 or ".so" not in (path := PurePosixPath(fields[5])).name:
            continue
        parts = path.parts
        for i, part in enumerate(parts[:-1]):
            if part in LIBRARY_PACKAGES:
                found.add("/".join(parts[i:]))
                break
    return sorted(found)


def registered_missing(ops: Sequence[str], needs: Sequence[Need] = ()) -> dict[str, list[str]]:
    """``missing``: the ops ``torch.ops.npu`` lacks once torch_npu, the kernel package and each
    module SGLang's path imports are imported, in that order (``imported``); ``libraries``: the
    kernel libraries then mapped. Raises ImportFailed naming a module that does not import."""

    # lazy: the engine's stack (torch, SGLang), not the base install's
    import torch

    imported = []
    for module in dict.fromkeys(["torch_npu", KERNEL_PACKAGE, *(n.module for n in needs)]):
        try:
            importlib.import_module(module)
        except Exception as exc:  # an import runs the module: any error stops the same start
            raise ImportFailed(module, exc) from exc
        imported.append(module)
    missing = [op for op in ops if not hasattr(torch.ops.npu, op)]
    return {"missing": missing, "imported": imported, "libraries": loaded_libraries()}


# ------------------------------------------------------------------------------------------ CLI


def _say(level: str, event: str, **fields: object) -> None:
    print(line(PART, level, event, **fields))


def _registered(site: Path) -> int:
    ops = [c.name for c in sglang_op_calls(site)]
    try:
        found = registered_missing(ops, sglang_needs(site))
    except ImportFailed as exc:
        _say(
            "error",
            "npu_ops_unavailable",
            module=exc.module,
            error=str(exc),
            next=f"the engine image's torch_npu / {KERNEL_PACKAGE} do not import as SGLang "
            "imports them (docs/images.md)",
        )
        return 1
    searched = {key: ",".join(found[key]) or "none" for key in ("imported", "libraries")}
    if found["missing"]:
        _say(
            "error",
            "npu_op_missing",
            ops=",".join(found["missing"]),
            **searched,
            next=f"the installed {KERNEL_PACKAGE} does not register them: rebuild the image "
            "with the pinned release (docs/images.md)",
        )
        return 1
    _say("info", "npu_ops_registered", ops=",".join(ops), **searched)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qwen_npu.hardware.kernel_contents")
    parser.add_argument("--site", type=Path, help="site-packages holding sglang and the kernel")
    parser.add_argument("--zip", type=Path, help="read the kernel from this release zip instead")
    parser.add_argument(
        "--registered", action="store_true", help="engine start: the ops are in torch.ops.npu"
    )
    args = parser.parse_args(argv)
    site = args.site or Path(sysconfig.get_paths()["purelib"])
    try:
        if args.registered:
            return _registered(site)
        kernel = KernelFiles.from_zip(args.zip) if args.zip else KernelFiles.from_site(site)
        verdict = check(site, kernel)
    except InputError as exc:
        _say("error", "kernel_contents_bad_input", detail=str(exc))
        return 2
    searched = {
        "kernel": str(args.zip or site),
        "packages": ",".join(LIBRARY_PACKAGES),
        "libraries": ",".join(verdict.libraries) or "none",
    }
    for item in verdict.missing:
        print(f"missing: {item}", file=sys.stderr)
    if verdict.missing:
        _say(
            "error",
            "kernel_contents_missing",
            **searched,
            missing="; ".join(verdict.missing),
            next="the kernel release does not hold what SGLang imports: check "
            "SGL_KERNEL_NPU_VERSION, CHIP and the asset (docs/images.md)",
        )
        return 1
    _say("info", "kernel_contents_ok", **searched, checked=verdict.checked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
