"""Does the installed scatter kernel still tile H by ``h_block_size``? Read from its source.

Why this exists: ``mamba-scatter-ub-aware`` works only by choosing the kernel's
``h_block_size``. The drift guard checks that the parameter exists, but newer sgl-kernel-npu work
(open upstream) keeps ``h_block_size`` in the signature and no longer uses it (a flat 1-D tile,
V and K tiles capped at 64). The patch would then apply and change nothing. Without an NPU the one
thing that can tell is the kernel module's Python source, which this module reads:

1. the wrapper (``move_intermediate_cache``) has an ``h_block_size`` parameter;
2. the value reaches a kernel launch ``kernel[grid](...)``, directly or through local names;
3. that kernel, defined in the same module, loops ``for ... in range(start, H, <that parameter>)``
   (``range``, ``tl.range`` or ``tl.static_range``), as sgl-kernel-npu's kernel does.

All three: ``tiles``. One missing: ``ignored``, with the reason. No source (a .pyc-only install):
``unknown``. Standard library only (ast, inspect).
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qwen_npu.constants import UNKNOWN as UNKNOWN  # one of this module's verdicts too

PARAM = "h_block_size"
RANGES = frozenset({"range", "static_range"})

TILES = "tiles"
IGNORED = "ignored"


@dataclass(frozen=True)
class Tiling:
    """The verdict (``tiles``, ``ignored``, ``unknown``) and one line saying why."""

    verdict: str
    reason: str


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _carriers(func: ast.FunctionDef) -> set[str]:
    """``h_block_size`` and every local name assigned from an expression that uses it."""
    carriers = {PARAM}
    changed = True
    while changed:
        changed = False
        for node in ast.walk(func):
            if not isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                continue
            if node.value is not None and _names(node.value) & carriers:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    new = _names(target) - carriers
                    if new:
                        carriers |= new
                        changed = True
    return carriers


def _launches(func: ast.FunctionDef, carriers: set[str]) -> list[tuple[str, str | int]]:
    """(kernel name, kernel parameter name or position) for every ``kernel[grid](...)`` argument
    that carries ``h_block_size``."""
    found: list[tuple[str, str | int]] = []
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
            continue
        kernel = node.func.value
        if not isinstance(kernel, ast.Name):
            continue
        for position, arg in enumerate(node.args):
            if _names(arg) & carriers:
                found.append((kernel.id, position))
        for keyword in node.keywords:
            if keyword.arg is not None and _names(keyword.value) & carriers:
                found.append((kernel.id, keyword.arg))
    return found


def _ranges_by(kernel: ast.FunctionDef, param: str) -> bool:
    """A ``for`` loop over ``range(start, stop, <param>)`` (or tl.range / tl.static_range)."""
    for node in ast.walk(kernel):
        if not (isinstance(node, ast.For) and isinstance(node.iter, ast.Call)):
            continue
        call = node.iter.func
        name = call.id if isinstance(call, ast.Name) else getattr(call, "attr", None)
        if name in RANGES and len(node.iter.args) == 3 and param in _names(node.iter.args[2]):
            return True
    return False


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def analyse_source(source: str, wrapper: str) -> Tiling:
    """The verdict for the wrapper function ``wrapper`` in module source ``source``."""
    functions = _functions(ast.parse(textwrap.dedent(source)))
    func = functions.get(wrapper)
    if func is None:
        return Tiling(UNKNOWN, f"{wrapper} is not defined in its module's source")
    params = [a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)]
    if PARAM not in params:
        return Tiling(IGNORED, f"{wrapper} has no {PARAM} parameter")
    carriers = _carriers(func)
    if not any(PARAM in _names(stmt) for stmt in func.body):
        return Tiling(IGNORED, f"{wrapper} accepts {PARAM} but never uses it")
    launches = _launches(func, carriers)
    if not launches:
        return Tiling(IGNORED, f"{wrapper} accepts {PARAM} but passes it to no kernel launch")
    for kernel_name, slot in launches:
        kernel = functions.get(kernel_name)
        if kernel is None:
            continue
        kernel_params = [a.arg for a in kernel.args.args]
        param = kernel_params[slot] if isinstance(slot, int) and slot < len(kernel_params) else slot
        if isinstance(param, str) and _ranges_by(kernel, param):
            return Tiling(TILES, f"{kernel_name} loops over H in steps of {param} (= {PARAM})")
    kernels = ", ".join(sorted({k for k, _ in launches}))
    return Tiling(IGNORED, f"{PARAM} reaches {kernels}, which does not loop over H in steps of it")


def analyse(wrapper: Callable[..., Any]) -> Tiling:
    """The verdict for an installed wrapper function (its module's source read from disk)."""
    module = sys.modules.get(getattr(wrapper, "__module__", "") or "")
    name = getattr(wrapper, "__name__", "")
    try:
        source = inspect.getsource(module) if module is not None else inspect.getsource(wrapper)
    except (OSError, TypeError):
        return Tiling(UNKNOWN, f"no source for {name} (a compiled-only install)")
    try:
        return analyse_source(source, name)
    except SyntaxError as exc:
        return Tiling(UNKNOWN, f"the source of {name} does not parse: {exc.msg}")
