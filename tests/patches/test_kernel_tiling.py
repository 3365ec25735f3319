"""Whether the installed scatter kernel still tiles H by h_block_size, told from its source, and
what `patches verify` and the state file say when the patch applies without effect.

The kernel variants below are stand-ins written for these tests: one that tiles (the
tests/stubs kernel, shaped like sgl-kernel-npu's), and the shapes newer upstream work would take
(h_block_size accepted and ignored, a flat 1-D tile, no parameter at all).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from qwen_npu.patches import cli
from qwen_npu.patches.fixes import mamba_scatter_ub_aware as scatter
from qwen_npu.patches.state import read_state
from qwen_npu.upstream.kernels import IGNORED, TILES, UNKNOWN, installed_tiling, tiling

#: Tiles, but through a local name and a positional argument, with tl.range.
TILES_POSITIONAL = """
import triton.language as tl

def _kernel(dst, src, n_heads, HB: tl.constexpr):
    for h0 in tl.range(0, n_heads, HB):
        pass

def move_intermediate_cache(ssm, cache, dst, src, steps, h_block_size=1):
    block = max(1, int(h_block_size))
    _kernel[(len(dst),)](ssm, cache, cache.shape[3], block)
"""

#: Accepted and ignored: the launch uses a fixed block.
ACCEPTS_AND_IGNORES = """
def _kernel(dst, src, h_dim, H_BLOCK_SIZE):
    for h0 in range(0, h_dim, H_BLOCK_SIZE):
        pass

def move_intermediate_cache(ssm, cache, dst, src, steps, h_block_size=1):
    _kernel[(len(dst),)](dst=ssm, src=cache, h_dim=cache.shape[3], H_BLOCK_SIZE=1)
    return ssm
"""

#: Passed on, but the kernel moves one flat 1-D tile and never loops over H by it.
FLAT_TILE = """
import triton.language as tl

def _flat_kernel(dst, src, numel, H_BLOCK_SIZE, BLOCK):
    offsets = tl.arange(0, BLOCK)
    for start in range(0, numel, BLOCK):
        pass

def move_intermediate_cache(ssm, cache, dst, src, steps, h_block_size=1):
    _flat_kernel[(len(dst),)](ssm, cache, cache[0, 0, 0].numel(), h_block_size, 64)
"""

NO_PARAMETER = """
def move_intermediate_cache(ssm, cache, dst, src, steps):
    return ssm
"""


def test_the_stub_kernel_tiles(kernel_stub: ModuleType) -> None:
    tiling = installed_tiling(kernel_stub.move_intermediate_cache)
    assert tiling.verdict == TILES
    assert "loops over H in steps of H_BLOCK_SIZE" in tiling.reason


@pytest.mark.parametrize(
    ("source", "verdict", "reason"),
    [
        (TILES_POSITIONAL, TILES, "_kernel loops over H in steps of HB"),
        (ACCEPTS_AND_IGNORES, IGNORED, "accepts h_block_size but never uses it"),
        (FLAT_TILE, IGNORED, "reaches _flat_kernel, which does not loop over H in steps of it"),
        (NO_PARAMETER, IGNORED, "has no h_block_size parameter"),
    ],
)
def test_verdicts_from_source(source: str, verdict: str, reason: str) -> None:
    found = tiling(source, "move_intermediate_cache")
    assert found.verdict == verdict
    assert reason in found.reason


def test_no_source_is_unknown() -> None:
    namespace: dict[str, Any] = {}
    exec(
        compile("def move_intermediate_cache(a, h_block_size=2): pass", "<built>", "exec"),
        namespace,
    )
    assert installed_tiling(namespace["move_intermediate_cache"]).verdict == UNKNOWN


def load_variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> ModuleType:
    """A kernel module variant on disk (so its source can be read), registered in sys.modules."""
    name = "qwen_npu_test_kernel_variant"
    path = tmp_path / f"{name}.py"
    stand_in_tl = (
        "from types import SimpleNamespace\ntl = SimpleNamespace(range=range, constexpr=int)\n"
    )
    path.write_text(textwrap.dedent(source).replace("import triton.language as tl\n", stand_in_tl))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def install_kernel(
    backend: ModuleType, fresh: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], None]]:
    """Put a kernel variant where SGLang's backend imported the kernel, with the patch reverted;
    afterwards the patch is reverted again first, so it never keeps the variant as SGLang's."""
    fresh(scatter)

    def install(source: str) -> None:
        variant = load_variant(tmp_path, monkeypatch, source)
        monkeypatch.setattr(backend, scatter.KERNEL, variant.move_intermediate_cache)

    yield install
    scatter.revert()


def test_an_ignoring_kernel_is_reported_applied_without_effect(
    install_kernel: Callable[[str], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    install_kernel(ACCEPTS_AND_IGNORES)
    state_dir = tmp_path / "state"
    monkeypatch.setenv("QWEN_NPU_STATE_DIR", str(state_dir))
    outcome = scatter.apply()
    assert (outcome.state, outcome.effect) == ("applied", IGNORED)
    assert "WITHOUT EFFECT: the kernel ignores h_block_size" in outcome.detail
    assert scatter.active()  # it still wraps the kernel: harmless, and useless
    log = capsys.readouterr().err
    assert "level=WARNING event=patch.applied patch=mamba-scatter-ub-aware" in log
    assert "effect=ignored" in log
    entry = (read_state(state_dir) or {})["patches"][scatter.INFO.name]
    assert (entry["state"], entry["effect"]) == ("applied", IGNORED)

    code = cli.main(["verify", "--strict", "--json"])
    out = capsys.readouterr()
    report = json.loads(out.out)
    row = {r["name"]: r for r in report["patches"]}[scatter.INFO.name]
    assert code == 1 and report["ok"] is False
    assert (row["state"], row["effect"]) == ("applied", IGNORED)
    assert cli.main(["verify"]) == 0  # without --strict it only reports
    assert "next (mamba-scatter-ub-aware): " in capsys.readouterr().err


def test_a_tiling_kernel_is_reported_effective(
    install_kernel: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    install_kernel(TILES_POSITIONAL)
    outcome = scatter.apply()
    assert (outcome.state, outcome.effect) == ("applied", TILES)
    assert "kernel tiles by h_block_size: _kernel loops over H in steps of HB" in outcome.detail
    capsys.readouterr()
    # MTP on, state dtype unknown: the mode runs the scatter (off the NPU the MTP-off decode
    # patch's kernel is not here, and this mode does not run it)
    mtp_on = ["--model-path", "/models/m", "--speculative-algorithm", "NEXTN"]
    assert cli.main(["verify", "--strict", "--engine-args", *mtp_on]) == 0


def test_the_pinned_setup_reports_tiles(backend: ModuleType) -> None:
    """What `make verify-patches` sees: SGLang 0.5.23 with the tests/stubs kernel."""
    outcome = scatter.apply()
    assert (outcome.state, outcome.effect) == ("applied", TILES)
    assert installed_tiling(scatter._original).verdict == TILES
