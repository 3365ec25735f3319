"""A stand-in for torch_npu in the engine image's cpu flavour: what a Docker build host sees.

Why this exists: the NPU image is built on a host with the CANN toolkit and torch_npu installed
but no NPU. There, ``import torch`` loads torch_npu through torch's device-backend entry point
(``torch.backends``, since torch 2.5), ``torch.npu`` exists and ``torch.npu.is_available()`` is
False, so SGLang's ``is_npu()`` raises at import time and a full ``qwen-npu patches verify``
cannot import its targets (issue 22). The cpu flavour installs this package so that
``make image-test`` builds and runs in that same situation: the build-time check
(``patches verify --build``) must pass with it loaded, the full check must not.

``QWEN_NPU_STANDIN_NPUS=N`` makes ``device_count()`` N and ``is_available()`` True (the engine
start on a node, for the entrypoint's tests); unset or 0, no device. No NPU code is here: nothing
computes, every tensor stays on the CPU. ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` keeps it unloaded.
"""

from __future__ import annotations

import os
import sys
import types

__version__ = "0.0.0+standin"


def _devices() -> int:
    raw = os.environ.get("QWEN_NPU_STANDIN_NPUS", "0").strip()
    return int(raw) if raw.isdigit() else 0


def _npu_module() -> types.ModuleType:
    npu = types.ModuleType("torch.npu", "torch_npu stand-in: the NPU device module")
    npu.is_available = lambda: _devices() > 0  # type: ignore[attr-defined]
    npu.device_count = _devices  # type: ignore[attr-defined]
    npu.__dict__["standin"] = True
    return npu


def _autoload() -> None:
    """torch's ``torch.backends`` entry point: register ``torch.npu`` as torch_npu does."""
    import torch

    if hasattr(torch, "npu"):
        return
    torch.utils.rename_privateuse1_backend("npu")
    torch._register_device_module("npu", _npu_module())
    sys.modules.setdefault("torch_npu.npu", sys.modules["torch.npu"])
