"""Which patches (and GDN contract links) the configured engine mode uses.

Why this exists: ``patches verify --strict`` at start-up used to fail the pod for any patch that
was not applied or upstream-fixed, whatever the mode. The decode-layout patch acts only with MTP
off, yet a drift in the decode kernel's text stopped every MTP pod (exit 4); the UB plan patch
changes nothing at a bf16 state (its plan is then the kernel's default 2, for every Qwen3.5/3.6
state shape: V = K = 128), which is every configuration the chart allows on 910B/A3, yet it too
could fail start-up. Each ledger entry now declares the modes it serves (``registry.Serves``); a
patch that the mode does not use is still applied, verified and drift-checked, but a problem with
it is a warning, the ``qwen_npu_patch_used_by_mode`` metric and a runbook line, not a failed start.

The mode is read from the engine's own command line, by SGLang's flag names: MTP on when
``--speculative-algorithm`` is given; the SSM state dtype from ``--mamba-ssm-dtype``, else
``SGLANG_MAMBA_SSM_DTYPE`` (config.json's value is not read here: unknown then, which counts as
"uses" for a dtype-bound patch); the draft's quantization from
``--speculative-draft-model-quantization`` (``unquant``: the draft is built without the target's
ModelSlim config, so the draft fixes are fallbacks). In the engine's processes that line is
``sys.argv`` (multiprocessing's spawn hands it to the scheduler processes); the entrypoint's check
runs in a process of its own and passes it (``patches verify --engine-args ...``, ``set_override``).
No command line (``verify`` run by hand): the mode is unknown and every patch counts as used, the
old strictness. Standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from qwen_npu.checkpoint.model_config import SSM_DTYPE_ENV
from qwen_npu.patches.registry import ContractLink, PatchInfo

UNQUANT = "unquant"


@dataclass(frozen=True)
class Mode:
    """The engine mode the patches' strictness follows."""

    mtp: bool
    state_dtype: str | None  # None: not said on the command line or in the environment
    draft_quantization: str | None  # --speculative-draft-model-quantization, None: inherited

    @property
    def draft_unquant(self) -> bool:
        return self.mtp and self.draft_quantization == UNQUANT

    def as_dict(self) -> dict[str, object]:
        return {
            "mtp": self.mtp,
            "state_dtype": self.state_dtype,
            "draft_quantization": self.draft_quantization,
        }

    def describe(self) -> str:
        dtype = self.state_dtype or "unknown"
        draft = f", draft {self.draft_quantization}" if self.mtp and self.draft_quantization else ""
        return f"MTP {'on' if self.mtp else 'off'}, state {dtype}{draft}"


def flag_value(argv: Sequence[str], *names: str) -> str | None:
    """The value of the last ``--name value`` or ``--name=value`` (SGLang's argparse keeps it).

    The one reader of the engine's command line: the mode here, the GDN contract's sources and
    preflight's ``--engine-args`` (``preflight.engine_args``) all read flags through it. It never
    raises (it runs on the engine's own ``sys.argv``): the callers judge the values."""
    value = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
    return value


def from_argv(argv: Sequence[str], environ: Mapping[str, str]) -> Mode | None:
    """The mode of an engine command line; None when ``argv`` is none (no ``--model-path``)."""
    if flag_value(argv, "--model-path", "--model") is None:
        return None
    dtype = flag_value(argv, "--mamba-ssm-dtype") or environ.get(SSM_DTYPE_ENV) or None
    return Mode(
        mtp=flag_value(argv, "--speculative-algorithm") is not None,
        state_dtype=dtype,
        draft_quantization=flag_value(argv, "--speculative-draft-model-quantization"),
    )


_override: Mode | None = None
_override_set = False


def set_override(mode: Mode | None) -> None:
    """Use ``mode`` in this process instead of ``sys.argv``'s (the entrypoint's check)."""
    global _override, _override_set
    _override, _override_set = mode, True


@contextmanager
def overridden(mode: Mode | None) -> Iterator[None]:
    """``set_override(mode)`` for the block, the previous setting after it."""
    global _override, _override_set
    saved = (_override, _override_set)
    set_override(mode)
    try:
        yield
    finally:
        _override, _override_set = saved


def current() -> Mode | None:
    """This process's mode: the override, else ``sys.argv`` read as an engine command line."""
    if _override_set:
        return _override
    return from_argv(sys.argv, os.environ)


def uses(info: PatchInfo, mode: Mode | None) -> bool:
    """Whether ``mode`` runs the code ``info`` fixes (an unknown mode: yes)."""
    if mode is None:
        return True
    serves = info.serves
    if mode.mtp not in serves.mtp:
        return False
    if serves.inherited_draft_only and mode.draft_unquant:
        return False
    if serves.state_dtypes is not None and mode.state_dtype is not None:
        return mode.state_dtype in serves.state_dtypes
    return True


def link_used(link: ContractLink, mode: Mode | None) -> bool:
    """Whether ``mode`` runs the code a GDN contract link reads (an unknown mode: yes)."""
    return mode is None or mode.mtp in link.serves_mtp
