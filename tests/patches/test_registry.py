"""registry: the ledger agrees with the patch modules and the tests on disk."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from qwen_npu.patches.registry import BY_NAME, PATCHES, STATES, get_patch
from tools.paths import REPO

FIX_DIR = REPO / "qwen_npu" / "patches" / "fixes"
TEST_DIR = Path(__file__).resolve().parent / "fixes"


def test_names_are_the_contract_names() -> None:
    assert [p.name for p in PATCHES] == [
        "modelslim-moe-unquant-fallback",
        "mtp-modelslim-unquant",
        "mamba-scatter-ub-aware",
        "gdn-decode-state-layout",
    ]
    assert STATES == ("applied", "disabled", "upstream-fixed", "drifted", "target-missing")


@pytest.mark.parametrize("info", PATCHES, ids=lambda p: p.name)
def test_each_entry_matches_its_module_and_test(info: object) -> None:
    from qwen_npu.patches.registry import PatchInfo

    assert isinstance(info, PatchInfo)
    basename = info.name.replace("-", "_")
    assert info.module == f"qwen_npu.patches.fixes.{basename}"
    assert (FIX_DIR / f"{basename}.py").is_file()
    assert (TEST_DIR / f"test_{basename}.py").is_file()
    module = importlib.import_module(info.module)
    assert module.INFO is info
    for name in ("apply", "revert", "active"):
        assert callable(getattr(module, name))
    doc = module.__doc__ or ""
    for needle in ("What:", "Why:", "How:", "pull/34353", "Remove when:"):
        assert needle in doc, f"{info.module} docstring lacks {needle!r}"
    assert info.upstream_pr.endswith("/pull/34353")
    assert info.target.partition(":")[2], f"{info.name}: target is module:Qualname"


def test_every_patch_module_on_disk_is_registered() -> None:
    # A fix module is one that defines apply(); they live in patches/fixes/, the framework beside
    # them (core, hook, registry, state, cli) defines none.
    def defines_apply(path: Path) -> bool:
        return re.search(r"^(def apply\(|apply[\w, ]* = )", path.read_text(), re.M) is not None

    fixes = {p.stem for p in FIX_DIR.glob("*.py") if defines_apply(p)}
    framework = [p.stem for p in FIX_DIR.parent.glob("*.py") if defines_apply(p)]
    assert framework == []
    assert fixes == {p.name.replace("-", "_") for p in PATCHES}


def test_unknown_name() -> None:
    assert get_patch("mtp-modelslim-unquant") is BY_NAME["mtp-modelslim-unquant"]
    with pytest.raises(KeyError, match="unknown patch 'x'; known: modelslim-moe"):
        get_patch("x")


def test_the_fingerprints_are_for_the_pinned_sglang(versions: dict[str, str]) -> None:
    """The drift guard's pinned shapes belong to docker/versions.env's SGLANG_VERSION: the release
    installed here (the candidate snapshot's release is tests/candidate's)."""
    from importlib.metadata import version

    assert version("sglang") == versions["SGLANG_VERSION"]
