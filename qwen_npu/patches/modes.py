"""Which patches (and GDN contract links) the configured engine mode uses.

Why this exists: a problem with a patch the engine's mode never runs (the MTP-off decode patch
under MTP, the UB plan at a bf16 state) used to fail every pod's start. Each ledger entry declares
the modes it serves (``registry.Serves``); a patch the mode does not use is still applied and
checked, but a problem with it is a warning, not a failed start. The mode is read from the
engine's command line by SGLang's flag names (``--speculative-algorithm``, ``--mamba-ssm-dtype``
else ``SGLANG_MAMBA_SSM_DTYPE``, ``--speculative-draft-model-quantization``): ``sys.argv`` in the
engine's processes, ``patches verify --engine-args`` in the entrypoint's check. No command line:
the mode is unknown and every patch counts as used. Standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from qwen_npu.checkpoint.model_config import SSM_DTYPE_ENV
from qwen_npu.patches.registry import ContractLink, PatchInfo


@dataclass(frozen=True)
class Mode:
    """The engine mode the patches' strictness follows."""

    mtp: bool
    state_dtype: str | None  # None: not said on the command line or in the environment
    draft_quantization: str | None  # --speculative-draft-model-quantization, None: inherited

    @property
    def draft_unquant(self) -> bool:
        return self.mtp and self.draft_quantization == "unquant"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

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


_override: tuple[Mode | None] | None = None  # (mode,) while overridden


@contextmanager
def overridden(mode: Mode | None) -> Iterator[None]:
    """Use ``mode`` in this process for the block instead of ``sys.argv``'s (the entrypoint's
    check hands the engine's command line)."""
    global _override
    saved, _override = _override, (mode,)
    try:
        yield
    finally:
        _override = saved


def current() -> Mode | None:
    """This process's mode: the override, else ``sys.argv`` read as an engine command line."""
    if _override is not None:
        return _override[0]
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
