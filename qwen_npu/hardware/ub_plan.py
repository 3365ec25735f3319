"""Plan the mamba scatter's ``h_block_size`` so its tile fits the Ascend unified buffer (UB).

Why this exists: sgl-kernel-npu's ``move_intermediate_cache`` moves tiles of
``[h_block_size, next_pow2(V), next_pow2(K)]`` state elements per program, and the compiler's
multi-buffer pass doubles each tile. SGLang 0.5.23 never passes ``h_block_size``, so the kernel's
default of 2 asks for 2,097,152 bits of a 1,572,864-bit UB on fp32 128x128 states and the first
request dies with ``ub overflow``. One pure rule, shared by the runtime patch
(``mamba-scatter-ub-aware``), ``qwen-npu ub-plan``, the preflight and the sidecar's predicted plan.

The contract: docs/architecture.md. h need not divide num_heads: the kernel loops over H in steps
of h with a mask ``h < H`` (checked under Triton's CPU interpreter, sgl-kernel-npu tag 2026.08.21),
so a last, partly masked block is moved correctly, and fewer, larger blocks mean fewer loop steps
(bf16 100x100 with H=3 gets 2, not 1). h stays a power of two (``tl.arange`` compiles only for
one) and at most H (a block beyond H would spend UB on rows that are all masked).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import Any

from qwen_npu.cli_parser import OneLineParser, fail, positive_int

#: Ascend 910B unified buffer per vector core: 192 KiB.
DEFAULT_UB_BYTES = 196_608
#: The compiler's multi-buffer pass keeps two copies of a tile.
DEFAULT_BUFFERS = 2

#: Bytes per element of the state dtypes SGLang can use for the mamba SSM state, and other
#: spellings of them (``fp32``, ``torch.bfloat16``).
DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}
_ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16",
            "half": "float16"}  # fmt: skip


class UbPlanError(ValueError):
    """A plan was asked for with impossible input (the message names the value and the fix)."""


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (n >= 1)."""
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class UbPlan:
    """The chosen block size and the bytes it needs; ``as_dict()`` is the contract's shape."""

    h_block_size: int
    tile_bytes: int
    buffered_bytes: int
    ub_bytes: int
    headroom_bytes: int  # ub - buffered, may be negative
    fits: bool
    plane_overflow: bool  # one (V, K) plane, buffered, alone exceeds the budget
    value_head_dim: int
    key_head_dim: int
    dtype: str
    buffers: int
    num_heads: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(
    value_head_dim: int,
    key_head_dim: int,
    dtype: object,
    num_heads: int | None = None,
    ub_bytes: int = DEFAULT_UB_BYTES,
    buffers: int = DEFAULT_BUFFERS,
) -> UbPlan:
    """Pick the largest power-of-two ``h_block_size`` whose buffered tile fits ``ub_bytes``."""
    sizes = {"value_head_dim": value_head_dim, "key_head_dim": key_head_dim,
             "num_heads": num_heads, "ub_bytes": ub_bytes, "buffers": buffers}  # fmt: skip
    for name, value in sizes.items():
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise UbPlanError(f"{name}={value!r}: must be a positive integer")
    text = str(dtype).strip().lower().removeprefix("torch.")
    dtype_name = _ALIASES.get(text, text)
    if dtype_name not in DTYPE_BYTES:
        raise UbPlanError(
            f"dtype {dtype!s}: not a mamba state dtype; use one of {', '.join(DTYPE_BYTES)}"
        )
    plane_bytes = next_pow2(value_head_dim) * next_pow2(key_head_dim) * DTYPE_BYTES[dtype_name]
    h = 1
    while (num_heads is None or 2 * h <= num_heads) and buffers * 2 * h * plane_bytes <= ub_bytes:
        h *= 2
    tile = h * plane_bytes
    return UbPlan(
        h_block_size=h,
        tile_bytes=tile,
        buffered_bytes=buffers * tile,
        ub_bytes=ub_bytes,
        headroom_bytes=ub_bytes - buffers * tile,
        fits=buffers * tile <= ub_bytes,
        plane_overflow=buffers * plane_bytes > ub_bytes,
        value_head_dim=value_head_dim,
        key_head_dim=key_head_dim,
        dtype=dtype_name,
        buffers=buffers,
        num_heads=num_heads,
    )


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="qwen-npu ub-plan",
        description="Plan the mamba scatter's h_block_size so its tile fits the Ascend UB.",
    )
    p.add_argument("--value-head-dim", type=positive_int, required=True, metavar="V")
    p.add_argument("--key-head-dim", type=positive_int, required=True, metavar="K")
    p.add_argument("--dtype", required=True, choices=sorted(DTYPE_BYTES))
    p.add_argument(
        "--num-heads", type=positive_int, default=None, metavar="H", help="value heads per rank"
    )
    p.add_argument("--ub-bytes", type=positive_int, default=DEFAULT_UB_BYTES)
    p.add_argument("--buffers", type=positive_int, default=DEFAULT_BUFFERS)
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    return p


def main(argv: list[str]) -> int:
    """``qwen-npu ub-plan``: exit 0 when the tile fits, 1 when it cannot, 2 on bad input."""
    args = _parser().parse_args(argv)
    try:
        result = plan(
            args.value_head_dim,
            args.key_head_dim,
            args.dtype,
            num_heads=args.num_heads,
            ub_bytes=args.ub_bytes,
            buffers=args.buffers,
        )
    except UbPlanError as exc:
        return fail("qwen-npu ub-plan", str(exc))
    if args.json:
        print(json.dumps(result.as_dict(), sort_keys=True))
    else:
        for key, value in result.as_dict().items():
            print(f"{key}={json.dumps(value)}")
        if result.plane_overflow:
            print(
                "warning: one (V,K) plane alone overflows the UB; the scatter cannot fit at any "
                "h_block_size. Use a smaller state dtype (--mamba-ssm-dtype bfloat16).",
                file=sys.stderr,
            )
    return 0 if result.fits else 1
