"""How an installed GDN kernel lays out the SSM state, read from its Python source.

Why this exists: SGLang 0.5.23 and the AscendC ops hold the state V-major (element ``[v][k]`` of
the math state ``S[k][v]`` at ``v*K + k``), and with ``V == K == 128`` a kernel that addresses it
K-major (``k*V + v``) does not crash: it reads and writes the state transposed. Without an NPU the
one thing that can tell is the kernel's source, which this module reads (standard library only:
``ast``). Two questions, each answered with the line it was read from:

- ``decode_addressing``: a Triton decode kernel's state address. The wrapper's
  ``initial_state_source`` reaches a launch ``kernel[grid](..., h0_source=initial_state_source)``;
  in that kernel, the sum that adds offsets to ``h0_source`` has one term that is a bare offset
  (the contiguous axis) and one offset times a dimension (the row). Offsets are named by the masks
  the kernel compares them with (``mask_k = o_k < K``). ``o_k[:, None] * V + o_v[None, :]``:
  ``k-major``; ``o_v[None, :] * K + o_k[:, None]``: ``v-major``; anything else ``unknown``.
- ``mover_strides``: does ``move_intermediate_cache`` honour the destination's strides below the
  slot (``ssm_states.stride(2..4)``: ``stride-honouring``), or use only its layer and slot strides
  and copy each slot's bytes in source order (``source-order``)?
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from qwen_npu.constants import UNKNOWN as UNKNOWN  # one of this module's verdicts too

K_MAJOR = "k-major"
V_MAJOR = "v-major"
SOURCE_ORDER = "source-order"
STRIDE_HONOURING = "stride-honouring"

STATE_ARG = "initial_state_source"
DST_ARG = "ssm_states"


@dataclass(frozen=True)
class Reading:
    """What was read (``k-major``, ``v-major``, ``source-order``, ...), where, and the text."""

    verdict: str
    line: int | None
    reason: str


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _params(func: ast.FunctionDef) -> list[str]:
    return [a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)]


def _terms(node: ast.expr) -> list[ast.expr]:
    """The terms of a sum ``a + b + c`` (a single term when it is no sum)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _terms(node.left) + _terms(node.right)
    return [node]


def _factors(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _offset_name(node: ast.expr) -> str | None:
    """``o_k`` for ``o_k``, ``o_k[:, None]`` or ``o_k[None, :]``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _dims_of_offsets(kernel: ast.FunctionDef) -> dict[str, str]:
    """offset name -> the dimension it is masked against (``o_k < K`` gives o_k -> K)."""
    dims: dict[str, str] = {}
    for node in ast.walk(kernel):
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Lt)
            and isinstance(node.left, ast.Name)
            and isinstance(node.comparators[0], ast.Name)
        ):
            dims.setdefault(node.left.id, node.comparators[0].id)
    return dims


def _state_param(
    wrapper: ast.FunctionDef, functions: dict[str, ast.FunctionDef]
) -> tuple[ast.FunctionDef | None, str]:
    """(the launched kernel, its parameter that receives the state), or (None, why not)."""
    for node in ast.walk(wrapper):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
            continue
        launched = node.func.value
        if not isinstance(launched, ast.Name) or launched.id not in functions:
            continue
        kernel = functions[launched.id]
        kernel_params = _params(kernel)
        for keyword in node.keywords:
            if keyword.arg is not None and STATE_ARG in _names(keyword.value):
                return kernel, keyword.arg
        for position, arg in enumerate(node.args):
            if STATE_ARG in _names(arg) and position < len(kernel_params):
                return kernel, kernel_params[position]
    return None, f"{wrapper.name} passes {STATE_ARG} to no kernel launch defined in its module"


def _layout_of_sum(terms: list[ast.expr], dims: dict[str, str]) -> str | None:
    contiguous = [dims[n] for t in terms if (n := _offset_name(t)) is not None and n in dims]
    rows: list[tuple[str, str]] = []
    for t in terms:
        factors = _factors(t)
        if len(factors) != 2:
            continue
        for offset, scale in (factors, factors[::-1]):
            name = _offset_name(offset)
            if name in dims and isinstance(scale, ast.Name):
                rows.append((dims[name], scale.id))
    if len(contiguous) != 1 or len(rows) != 1:
        return None
    (fast,), ((row_dim, row_scale),) = contiguous, rows
    if fast == "V" and row_dim == "K" and row_scale == "V":
        return K_MAJOR
    if fast == "K" and row_dim == "V" and row_scale == "K":
        return V_MAJOR
    return None


def decode_addressing(source: str, wrapper: str | None = None) -> Reading:
    """The state layout a decode kernel module addresses (see the module docstring)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return Reading(UNKNOWN, exc.lineno, f"the source does not parse: {exc.msg}")
    functions = _functions(tree)
    if wrapper is not None:
        candidates = [functions[wrapper]] if wrapper in functions else []
    else:
        candidates = [f for f in functions.values() if STATE_ARG in _params(f)]
    if not candidates:
        named = wrapper or f"a function with a parameter {STATE_ARG}"
        return Reading(UNKNOWN, None, f"no {named} in the module")
    kernel, param = _state_param(candidates[0], functions)
    if kernel is None:
        return Reading(UNKNOWN, candidates[0].lineno, param)
    dims = _dims_of_offsets(kernel)
    carriers = {param}
    for node in ast.walk(kernel):  # p_h0 = h0_source + ...; later sums may add to p_h0
        if isinstance(node, ast.Assign) and _names(node.value) & carriers:
            carriers |= {n for t in node.targets for n in _names(t)}
    found: dict[str, list[tuple[int, str]]] = {}
    for node in ast.walk(kernel):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
            continue
        terms = _terms(node)
        if not any(isinstance(t, ast.Name) and t.id in carriers for t in terms):
            continue
        layout = _layout_of_sum(terms, dims)
        if layout is not None:
            found.setdefault(layout, []).append((node.lineno, ast.unparse(node)))
    if not found:
        return Reading(
            UNKNOWN,
            kernel.lineno,
            f"{kernel.name}: no state address of the form <{param}> + <offset>*<dim> + <offset>",
        )
    if len(found) > 1:
        both = "; ".join(f"line {at[0][0]}: {layout}" for layout, at in found.items())
        return Reading(
            UNKNOWN, kernel.lineno, f"{kernel.name} addresses the state both ways ({both})"
        )
    ((layout, sites),) = found.items()
    line, text = sites[0]
    return Reading(layout, line, f"{kernel.name}: {' '.join(text.split())}")


def _stride_indices(func: ast.FunctionDef, tensor: str) -> list[tuple[int, int | None]]:
    """(line, dimension) for every read of ``tensor``'s strides (None: an index not a literal)."""
    tuples: set[str] = set()
    found: list[tuple[int, int | None]] = []

    def literal(node: ast.expr) -> int | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, int)
        ):
            return -node.operand.value
        return None

    def is_stride_call(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "stride"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == tensor
        )

    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and is_stride_call(node.value):
            call = node.value
            if isinstance(call, ast.Call) and not call.args:
                tuples |= {n for t in node.targets for n in _names(t)}
    for node in ast.walk(func):
        if is_stride_call(node):
            assert isinstance(node, ast.Call)
            if node.args:
                found.append((node.lineno, literal(node.args[0])))
        elif isinstance(node, ast.Subscript) and (
            is_stride_call(node.value)
            or (isinstance(node.value, ast.Name) and node.value.id in tuples)
        ):
            found.append((node.lineno, literal(node.slice)))
    return found


def mover_strides(source: str, wrapper: str = "move_intermediate_cache") -> Reading:
    """Whether the mover honours its destination's strides below the slot (module docstring)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return Reading(UNKNOWN, exc.lineno, f"the source does not parse: {exc.msg}")
    func = _functions(tree).get(wrapper)
    if func is None:
        return Reading(UNKNOWN, None, f"no {wrapper} in the module")
    params = _params(func)
    dst = DST_ARG if DST_ARG in params else (params[0] if params else DST_ARG)
    reads = _stride_indices(func, dst)
    if not reads:
        return Reading(UNKNOWN, func.lineno, f"{wrapper} reads no stride of {dst}")
    below = [(line, dim) for line, dim in reads if dim is None or dim < 0 or dim >= 2]
    if below:
        line, dim = below[0]
        shown = "a computed index" if dim is None else str(dim)
        return Reading(
            STRIDE_HONOURING,
            line,
            f"{wrapper} reads {dst}.stride({shown}): it honours the destination's H/V/K strides",
        )
    return Reading(
        SOURCE_ORDER,
        reads[0][0],
        f"{wrapper} reads only {dst}'s layer and slot strides: each slot is copied in source order",
    )
