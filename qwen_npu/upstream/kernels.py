"""What an installed Triton kernel module does, read from its source (ast, no import, no NPU).

Why this exists: with ``V == K == 128`` a kernel that addresses the SSM state in the other order,
or a scatter that ignores its ``h_block_size``, runs without an error; off the NPU its Python
source is the one thing that can tell. Each answer is a ``Reading``: verdict, line, why.

- ``tiling``: does the scatter wrapper's ``h_block_size`` reach a kernel launch, directly or through
  local names, whose kernel loops ``for ... in range(start, H, <it>)`` (``range``, ``tl.range``,
  ``tl.static_range``)? ``tiles``, else ``ignored`` with the reason.
- ``decode_addressing``: the wrapper's ``initial_state_source`` reaches a launch
  ``kernel[grid](..., h0_source=...)``; there the sum adding offsets to it has one bare offset (the
  contiguous axis) and one offset times a dimension, offsets named by their masks (``o_k < K``):
  ``o_k[:, None] * V + o_v[None, :]`` is ``k-major``, ``o_v[None, :] * K + o_k[:, None]``
  ``v-major``.
- ``mover_strides``: does ``move_intermediate_cache`` read its destination's strides below the
  slot (``ssm_states.stride(2..4)``: ``stride-honouring``) or only the layer and slot strides,
  copying each slot in source order (``source-order``)?
"""

from __future__ import annotations

import ast
import textwrap
from typing import NamedTuple

from qwen_npu.constants import UNKNOWN as UNKNOWN  # one of the verdicts
from qwen_npu.upstream.source import functions, module_source, names, params

TILES, IGNORED = "tiles", "ignored"
K_MAJOR, V_MAJOR = "k-major", "v-major"
SOURCE_ORDER, STRIDE_HONOURING = "source-order", "stride-honouring"
TILE_PARAM = "h_block_size"
STATE_ARG = "initial_state_source"
DST_ARG = "ssm_states"


class Reading(NamedTuple):
    """The verdict (one of this module's, or ``unknown``), the line it was read from, and why."""

    verdict: str
    line: int | None
    reason: str


def _wrapper(
    source: str, name: str
) -> tuple[dict[str, ast.FunctionDef], ast.FunctionDef] | Reading:
    """The module's top-level functions and the one called ``name``; or a Reading saying why not."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError as exc:
        return Reading(UNKNOWN, exc.lineno, f"the source does not parse: {exc.msg}")
    found = functions(tree)
    if name not in found:
        return Reading(UNKNOWN, None, f"no {name} in the module")
    return found, found[name]


def _carriers(func: ast.FunctionDef, start: str) -> set[str]:
    """``start`` and every local name assigned from an expression that uses one of them."""
    carriers, changed = {start}, True
    while changed:
        changed = False
        for node in ast.walk(func):
            if not isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                continue
            if node.value is not None and names(node.value) & carriers:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                new = {n for t in targets for n in names(t)} - carriers
                carriers |= new
                changed |= bool(new)
    return carriers


def _launches(
    func: ast.FunctionDef, carried: set[str], kernels: dict[str, ast.FunctionDef]
) -> list[tuple[str, str | None]]:
    """(kernel, its parameter that receives a carried name; None when unknown) for every launch
    ``kernel[grid](...)`` in ``func``."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
            continue
        if not isinstance(node.func.value, ast.Name):
            continue
        kernel = node.func.value.id
        slots = params(kernels[kernel]) if kernel in kernels else []
        for keyword in node.keywords:
            if keyword.arg is not None and names(keyword.value) & carried:
                found.append((kernel, keyword.arg))
        for position, arg in enumerate(node.args):
            if names(arg) & carried:
                found.append((kernel, slots[position] if position < len(slots) else None))
    return found


def _loops_by(kernel: ast.FunctionDef, param: str) -> bool:
    """A ``for`` loop over ``range(start, stop, <param>)`` (or tl.range / tl.static_range)."""
    for node in ast.walk(kernel):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call):
            call = node.iter.func
            name = call.id if isinstance(call, ast.Name) else getattr(call, "attr", None)
            args = node.iter.args
            if name in ("range", "static_range") and len(args) == 3 and param in names(args[2]):
                return True
    return False


def tiling(source: str, wrapper: str) -> Reading:
    """Whether ``wrapper`` in module ``source`` tiles H by ``h_block_size`` (module docstring)."""
    found = _wrapper(source, wrapper)
    if isinstance(found, Reading):
        return found
    kernels, func = found
    if TILE_PARAM not in params(func):
        return Reading(IGNORED, func.lineno, f"{wrapper} has no {TILE_PARAM} parameter")
    if not any(TILE_PARAM in names(stmt) for stmt in func.body):
        return Reading(IGNORED, func.lineno, f"{wrapper} accepts {TILE_PARAM} but never uses it")
    launches = _launches(func, _carriers(func, TILE_PARAM), kernels)
    if not launches:
        why = f"{wrapper} accepts {TILE_PARAM} but passes it to no kernel launch"
        return Reading(IGNORED, func.lineno, why)
    for name, param in launches:
        if name in kernels and param is not None and _loops_by(kernels[name], param):
            why = f"{name} loops over H in steps of {param} (= {TILE_PARAM})"
            return Reading(TILES, kernels[name].lineno, why)
    reached = ", ".join(sorted({name for name, _ in launches}))
    why = f"{TILE_PARAM} reaches {reached}, which does not loop over H in steps of it"
    return Reading(IGNORED, func.lineno, why)


def installed_tiling(wrapper: object) -> Reading:
    """``tiling`` of an installed wrapper function (its module's source read from disk)."""
    name = str(getattr(wrapper, "__name__", ""))
    source = module_source(wrapper)
    if source is None:
        return Reading(UNKNOWN, None, f"no source for {name} (a compiled-only install)")
    return tiling(source, name)


def _terms(node: ast.expr, op: type[ast.operator]) -> list[ast.expr]:
    """The operands of ``a + b + c`` (op Add) or ``a * b`` (op Mult); [node] when it is neither."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, op):
        return _terms(node.left, op) + _terms(node.right, op)
    return [node]


def _offset(node: ast.expr) -> str | None:
    """``o_k`` for ``o_k``, ``o_k[:, None]`` or ``o_k[None, :]``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _layout_of_sum(terms: list[ast.expr], dims: dict[str, str]) -> str | None:
    contiguous = [dims[n] for t in terms if (n := _offset(t)) is not None and n in dims]
    rows = []
    for t in terms:
        factors = _terms(t, ast.Mult)
        if len(factors) == 2:
            for offset, scale in (factors, factors[::-1]):
                name = _offset(offset)
                if name in dims and isinstance(scale, ast.Name):
                    rows.append((dims[name], scale.id))
    if len(contiguous) != 1 or len(rows) != 1:
        return None
    return {("V", "K", "V"): K_MAJOR, ("K", "V", "K"): V_MAJOR}.get((contiguous[0], *rows[0]))


def decode_addressing(source: str, wrapper: str) -> Reading:
    """The state layout a decode kernel module addresses (module docstring)."""
    found = _wrapper(source, wrapper)
    if isinstance(found, Reading):
        return found
    kernels, func = found
    launched = [
        (kernels[k], p) for k, p in _launches(func, {STATE_ARG}, kernels) if k in kernels and p
    ]
    if not launched:
        why = f"{func.name} passes {STATE_ARG} to no kernel launch defined in its module"
        return Reading(UNKNOWN, func.lineno, why)
    kernel, param = launched[0]
    dims: dict[str, str] = {}  # offset -> the dimension it is masked against (o_k < K: o_k -> K)
    for node in ast.walk(kernel):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Lt):
            left, right = node.left, node.comparators[0]
            if isinstance(left, ast.Name) and isinstance(right, ast.Name):
                dims.setdefault(left.id, right.id)
    carriers = _carriers(kernel, param)  # p_h0 = h0_source + ...; later sums may add to p_h0
    sums: dict[str, list[ast.BinOp]] = {}
    for node in ast.walk(kernel):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            terms = _terms(node, ast.Add)
            if any(isinstance(t, ast.Name) and t.id in carriers for t in terms):
                layout = _layout_of_sum(terms, dims)
                if layout is not None:
                    sums.setdefault(layout, []).append(node)
    if not sums:
        why = f"{kernel.name}: no state address of the form <{param}> + <offset>*<dim> + <offset>"
        return Reading(UNKNOWN, kernel.lineno, why)
    if len(sums) > 1:
        both = "; ".join(f"line {at[0].lineno}: {layout}" for layout, at in sums.items())
        return Reading(
            UNKNOWN, kernel.lineno, f"{kernel.name} addresses the state both ways ({both})"
        )
    ((layout, (site, *_)),) = sums.items()
    return Reading(layout, site.lineno, f"{kernel.name}: {' '.join(ast.unparse(site).split())}")


def _literal(node: ast.expr) -> int | None:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return value if isinstance(value, int) else None


def mover_strides(source: str, wrapper: str = "move_intermediate_cache") -> Reading:
    """Whether the mover honours its destination's strides below the slot (module docstring)."""
    found = _wrapper(source, wrapper)
    if isinstance(found, Reading):
        return found
    _, func = found
    own = params(func)
    dst = DST_ARG if DST_ARG in own else (own[0] if own else DST_ARG)

    def strides_call(node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and ast.unparse(node.func) == f"{dst}.stride"

    tuples: set[str] = set()  # dst_strides = ssm_states.stride()
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and ast.unparse(node.value) == f"{dst}.stride()":
            tuples |= {n for t in node.targets for n in names(t)}
    reads: list[tuple[int, int | None]] = []  # (line, dimension; None: not a literal)
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and strides_call(node) and node.args:
            reads.append((node.lineno, _literal(node.args[0])))
        elif isinstance(node, ast.Subscript) and (
            strides_call(node.value)
            or (isinstance(node.value, ast.Name) and node.value.id in tuples)
        ):
            reads.append((node.lineno, _literal(node.slice)))
    if not reads:
        return Reading(UNKNOWN, func.lineno, f"{wrapper} reads no stride of {dst}")
    below = [(line, dim) for line, dim in reads if dim is None or dim < 0 or dim >= 2]
    if below:
        line, dim = below[0]
        shown = "a computed index" if dim is None else str(dim)
        why = f"{wrapper} reads {dst}.stride({shown}): it honours the destination's H/V/K strides"
        return Reading(STRIDE_HONOURING, line, why)
    why = (
        f"{wrapper} reads only {dst}'s layer and slot strides: each slot is copied in source order"
    )
    return Reading(SOURCE_ORDER, reads[0][0], why)
