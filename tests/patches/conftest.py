"""Fixtures for the patch tests: SGLang 0.5.23's real modules, synthetic descriptions, the kernel
stand-in, and helpers to see a target patched or unpatched.

The .pth hook in .venv has already installed the post-import hooks when pytest starts, so the first
import of a target applies its patch, exactly as in the engine. ``unpatched`` reverts one patch for
a test and applies it again afterwards.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .helpers import import_quietly

MODELSLIM = "sglang.srt.layers.quantization.modelslim.modelslim"
FUSED_MOE = "sglang.srt.layers.moe.fused_moe_triton"
MTP = "sglang.srt.models.qwen3_5_mtp"
BACKEND = "sglang.srt.hardware_backend.npu.attention.ascend_hybrid_linear_attn_backend"
GDN_TRITON = "sglang.srt.layers.attention.linear.kernels.gdn_triton"


# The fixtures that import SGLang's real modules: a test that asks for one is marked ``sglang``
# (make test-fast leaves it out), whatever marks it declares itself.
SGLANG_FIXTURES = frozenset({"modelslim", "fused_moe", "mtp_module", "backend", "gdn_triton"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents and SGLANG_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.sglang)


@pytest.fixture(scope="session")
def modelslim() -> ModuleType:
    import_quietly(FUSED_MOE)
    return import_quietly(MODELSLIM)


@pytest.fixture(scope="session")
def fused_moe() -> ModuleType:
    return import_quietly(FUSED_MOE)


@pytest.fixture(scope="session")
def mtp_module() -> ModuleType:
    return import_quietly(MTP)


@pytest.fixture(scope="session")
def backend() -> ModuleType:
    return import_quietly(BACKEND)


@pytest.fixture(scope="session")
def gdn_triton() -> ModuleType:
    return import_quietly(GDN_TRITON)


@pytest.fixture(scope="session")
def decode_kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModuleType]:
    """The sgl-kernel-npu decode stand-in under Triton's interpreter: ``k-major`` (as released)
    and ``v-major`` (fixed)."""
    from . import gdn_kernels

    folder = tmp_path_factory.mktemp("decode_kernels")
    return {layout: gdn_kernels.load(folder, layout) for layout in ("k-major", "v-major")}


@pytest.fixture(scope="session")
def v_major_kernel() -> Iterator[ModuleType]:
    """qwen-npu's V-major decode kernel (the in-place route) under Triton's interpreter, with
    triton's library functions interpreted for the session (fixtures/triton_interpreter.py)."""
    from fixtures.triton_interpreter import library

    from . import gdn_kernels

    with library():
        yield gdn_kernels.load_v_major()


@pytest.fixture()
def kernel_stub() -> Iterator[ModuleType]:
    """The sgl_kernel_npu stand-in, with its call log cleared before and after."""
    stub = importlib.import_module("sgl_kernel_npu.mamba.mamba_state_update_triton")
    stub.reset()
    stub.EMULATE, stub.UB_BYTES = False, None
    yield stub
    stub.reset()
    stub.EMULATE, stub.UB_BYTES = False, None


@pytest.fixture()
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Revert a patch module for the test; apply it again (with a clean environment) after."""
    reverted: list[Any] = []

    def _fresh(patch_module: Any) -> Any:
        patch_module.revert()
        reverted.append(patch_module)
        return patch_module

    monkeypatch.delenv("QWEN_NPU_DISABLE_PATCHES", raising=False)
    monkeypatch.delenv("QWEN_NPU_STATE_DIR", raising=False)
    yield _fresh
    monkeypatch.undo()
    for patch_module in reverted:
        patch_module.revert()
        patch_module.apply()
