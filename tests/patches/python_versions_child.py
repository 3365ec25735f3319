"""Run by tests/patches/test_python_versions.py under each Python the engine can run (3.11-3.13).

Standard library and qwen_npu only: the interpreters under test have neither torch nor SGLang, so
nothing here imports SGLang. Usage: ``python python_versions_child.py REPO SGLANG_SITE WORK``.
Prints one JSON object:

- ``pins``: per patch pin, ``file`` (the fingerprint of the pinned def read from SGLang 0.5.23's
  real module file, the build-time check's path) and ``guard`` / ``guard_cosmetic`` /
  ``guard_changed`` (``core.pin_mismatch`` on a function object compiled from the def's verbatim
  source, from the same source with comments, blank lines and a new docstring, and with one
  statement added: None means "looks like the pinned release"); ``unpinned``: patches without
  ``PINS``.
- ``hook``: the ``.pth`` start-up hook in a fresh virtual environment of this interpreter applying
  ``mtp-modelslim-unquant`` to a module holding SGLang 0.5.23's real ``_mtp_quant_config``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any


def _def_node(source: str, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    from qwen_npu.upstream.source import find_function

    node = find_function(ast.parse(source), qualname)
    assert node is not None, qualname
    return node


def skeleton(source: str, qualname: str, edit: str = "") -> str:
    """A module holding only the pinned def (verbatim), inside its class when it is a method.

    ``edit``: "" (verbatim), "cosmetic" (comments, blank lines, another docstring: the same code),
    "changed" (one statement added to the body).
    """
    node = _def_node(source, qualname)
    lines = source.splitlines()
    body = lines[node.lineno - 1 : node.end_lineno]
    indent = " " * (node.col_offset + 4)
    first = node.body[0]
    has_doc = (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )
    header = body[: first.lineno - node.lineno]  # the ``def`` line(s)
    rest = body[
        ((first.end_lineno or first.lineno) if has_doc else first.lineno - 1) - node.lineno + 1 :
    ]
    if edit == "cosmetic":
        body = [
            *header,
            f'{indent}"""A docstring that says something else."""',
            "",
            f"{indent}# a comment that changes no code",
            *rest,
            f"{indent}# trailing comment",
            "",
        ]
    elif edit == "changed":
        body = [*body[: len(body) - len(rest)], f"{indent}_qwen_npu_drift = 1", *rest]
    text = "from __future__ import annotations\n\n"
    if "." in qualname:
        text += f"class {qualname.split('.')[0]}:\n"
    return text + "\n".join(body) + "\n"


def load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def guard(work: Path, source: str, pin: Any, edit: str) -> str | None:
    from qwen_npu.patches import core

    tag = f"{pin.qualname.replace('.', '_')}_{edit or 'verbatim'}"
    path = work / f"{tag}.py"
    path.write_text(skeleton(source, pin.qualname, edit))
    obj: Any = load(path, tag)
    for part in pin.qualname.split("."):
        obj = getattr(obj, part)
    return core.pin_mismatch(pin, obj)


def pins(repo: Path, site: Path, work: Path) -> tuple[list[dict[str, Any]], list[str]]:
    import importlib

    from qwen_npu.patches.registry import PATCHES
    from qwen_npu.upstream.source import fingerprint_in_source, read

    rows, unpinned = [], []
    for info in PATCHES:
        patch = importlib.import_module(info.module)
        if not getattr(patch, "PINS", None):
            unpinned.append(info.name)
        for pin in getattr(patch, "PINS", ()):
            path = site / (pin.module.replace(".", "/") + ".py")
            source = path.read_text()
            rows.append(
                {
                    "patch": info.name,
                    "qualname": pin.qualname,
                    "pinned": pin.fingerprint,
                    "file": fingerprint_in_source(read(path) or "", pin.qualname),
                    "guard": guard(work, source, pin, ""),
                    "guard_cosmetic": guard(work, source, pin, "cosmetic"),
                    "guard_changed": guard(work, source, pin, "changed"),
                }
            )
    return rows, unpinned


FAKE_MTP_HEAD = '''"""Stand-in for SGLang's qwen3_5_mtp module: 0.5.23's real _mtp_quant_config."""


def is_npu():
    return False


def get_spec():
    raise RuntimeError("no server args in this stand-in")


'''

HOOK_CHILD = """
import json, os, sys
import sglang.srt.models.qwen3_5_mtp as mtp
from qwen_npu.patches import hook
from qwen_npu.patches.fixes import mtp_modelslim_unquant as patch
state = json.load(open(os.path.join(os.environ["QWEN_NPU_STATE_DIR"], "state.json")))
probe = patch._ProbeModelSlimConfig()
print(json.dumps({
    "hook_installed": hook.installed(),
    "state": state["patches"]["mtp-modelslim-unquant"]["state"],
    "active": patch.active(),
    "all_float_mtp_config": repr(mtp._mtp_quant_config(probe)),
}))
"""


def hook(repo: Path, site: Path, work: Path) -> dict[str, Any]:
    """The .pth hook in a fresh venv of this interpreter, on a module with the real function."""
    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    fake = work / "fake-sglang"
    models = fake / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    for package in (fake / "sglang", fake / "sglang" / "srt", models):
        (package / "__init__.py").write_text("")
    real = (site / "sglang/srt/models/qwen3_5_mtp.py").read_text()
    node = _def_node(real, "_mtp_quant_config")
    segment = "\n".join(real.splitlines()[node.lineno - 1 : node.end_lineno])
    (models / "qwen3_5_mtp.py").write_text(FAKE_MTP_HEAD + segment + "\n")
    # What an install does: the package importable, then qwen_npu_patches.pth (alphabetical order).
    Path(purelib, "00-qwen-npu-source.pth").write_text(f"{repo}\n{fake}\n")
    hook_pth = repo / "qwen_npu" / "patches" / "qwen_npu_patches.pth"
    Path(purelib, "qwen_npu_patches.pth").write_text(hook_pth.read_text())
    state_dir = work / "state"
    state_dir.mkdir()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "QWEN_NPU", "SGLANG"))
    }
    env["QWEN_NPU_STATE_DIR"] = str(state_dir)
    done = subprocess.run(
        [str(python), "-c", HOOK_CHILD], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["log"] = [line for line in done.stderr.splitlines() if "qwen_npu" in line]
    return result


def main() -> None:
    repo, site, work = (Path(a) for a in sys.argv[1:4])
    sys.path.insert(0, str(repo))
    sys.dont_write_bytecode = True
    rows, unpinned = pins(repo, site, work)
    version = ".".join(map(str, sys.version_info[:3]))
    result = {"version": version, "pins": rows, "unpinned": unpinned}
    print(json.dumps({**result, "hook": hook(repo, site, work)}))


if __name__ == "__main__":
    main()
