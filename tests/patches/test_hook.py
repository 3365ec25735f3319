"""hook: the .pth start-up hook, post-import triggering, and a spawned child getting the patches."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import site
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qwen_npu.patches import hook
from tools.paths import REPO, STUBS

PTH = REPO / "qwen_npu" / "patches" / "qwen_npu_patches.pth"


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def test_the_pth_file_is_installed_in_site_packages() -> None:
    installed = [Path(d) / PTH.name for d in site.getsitepackages()]
    found = [p for p in installed if p.is_file()]
    assert found, f"{PTH.name} not in {site.getsitepackages()}: run make setup"
    assert found[0].read_text() == PTH.read_text()
    assert PTH.read_text().startswith("import ")  # site executes only lines that start so


def test_start_up_imports_only_the_hook() -> None:
    out = python(
        "import sys; from qwen_npu.patches import hook as h;"
        "print(sorted(m for m in sys.modules if m.startswith(('qwen_npu', 'sglang', 'torch'))));"
        "print(type(sys.meta_path[0]).__name__, h.installed())"
    )
    assert out.returncode == 0, out.stderr
    modules, finder = out.stdout.splitlines()
    assert modules == "['qwen_npu', 'qwen_npu.patches', 'qwen_npu.patches.hook']"
    assert finder == "PostImportFinder True"


def test_the_finder_watches_every_trigger_of_the_registry() -> None:
    """TRIGGER_PACKAGES, the finder's cheap first filter, hides no trigger of the registry (a patch
    whose trigger it skipped would never apply)."""
    from qwen_npu.patches.registry import PATCHES

    assert [m for p in PATCHES for m in p.triggers if not hook._watched(m)] == []
    assert not hook._watched("json") and not hook._watched("sglang.srt.not_a_trigger")


def test_the_hook_can_be_kept_out() -> None:
    out = python(
        "from qwen_npu.patches import hook; print(hook.installed())", QWEN_NPU_PATCHES_HOOK="0"
    )
    assert out.stdout.strip() == "False"


@pytest.fixture()
def synthetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Two trigger modules and a patch module on sys.path, watched instead of SGLang's."""
    (tmp_path / "hk_trig_a.py").write_text("import hk_trig_b\nVALUE = 'a'\n")
    (tmp_path / "hk_trig_b.py").write_text("VALUE = 'b'\n")
    (tmp_path / "hk_lonely.py").write_text("VALUE = 'c'\n")
    (tmp_path / "hk_patch.py").write_text(
        textwrap.dedent(
            """
            import sys
            CALLS = []
            def apply():
                CALLS.append(sorted(m for m in ('hk_trig_a', 'hk_trig_b') if m in sys.modules))
                if sys.modules['hk_trig_a'].VALUE != 'a':
                    raise AssertionError('applied before hk_trig_a finished')
            """
        )
    )
    (tmp_path / "hk_broken_patch.py").write_text("def apply():\n    raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        hook,
        "TRIGGERS",
        {"hk_patch": ("hk_trig_a", "hk_trig_b"), "hk_broken_patch": ("hk_lonely",)},
    )
    monkeypatch.setattr(
        hook, "TRIGGER_PACKAGES", frozenset({"hk_trig_a", "hk_trig_b", "hk_lonely"})
    )
    monkeypatch.setattr(hook, "_loaded", set())
    monkeypatch.setattr(hook, "_started", set())
    assert hook.install()
    yield tmp_path
    for name in ("hk_trig_a", "hk_trig_b", "hk_lonely", "hk_patch", "hk_broken_patch"):
        sys.modules.pop(name, None)


def test_patch_applies_once_when_all_its_triggers_have_loaded(synthetic: Path) -> None:
    importlib.import_module("hk_trig_b")  # alone: not enough
    assert "hk_patch" not in sys.modules
    trig_a = importlib.import_module("hk_trig_a")  # now both are loaded
    calls = sys.modules["hk_patch"].CALLS
    assert calls == [["hk_trig_a", "hk_trig_b"]]
    assert type(trig_a.__loader__).__name__ == "SourceFileLoader"  # real loader handed back
    assert type(trig_a.__spec__.loader).__name__ == "SourceFileLoader"
    hook.install()  # again: no second apply
    assert len(calls) == 1


def test_nested_trigger_import_waits_for_the_outer_module(synthetic: Path) -> None:
    importlib.import_module("hk_trig_a")  # imports hk_trig_b while hk_trig_a is half-done
    assert sys.modules["hk_patch"].CALLS == [["hk_trig_a", "hk_trig_b"]]


def test_a_failing_patch_never_breaks_the_import(
    synthetic: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert importlib.import_module("hk_lonely").VALUE == "c"
    err = capsys.readouterr().err
    assert "event=patch.hook_failed module=hk_broken_patch" in err and "boom" in err


def test_install_applies_to_modules_imported_before_it(synthetic: Path) -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(synthetic)!r}); import hk_trig_a;"
        "from qwen_npu.patches import hook;"
        "hook.TRIGGERS = {'hk_patch': ('hk_trig_a', 'hk_trig_b')};"
        "hook.TRIGGER_PACKAGES = frozenset({'hk_trig_a', 'hk_trig_b'});"
        "print('hk_patch' in sys.modules, hook.install());"
        "print(sys.modules['hk_patch'].CALLS)"
    )
    out = python(code)
    assert out.stdout.splitlines() == ["False True", "[['hk_trig_a', 'hk_trig_b']]"], out.stderr


def _child_report() -> dict[str, Any]:
    """Runs in a spawned child: what did the .pth hook do there?"""
    from qwen_npu.patches import hook as child_hook

    before = sorted(m for m in sys.modules if m.startswith("sglang"))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import sglang.srt.models.qwen3_5_mtp as mtp
    from qwen_npu.patches import core
    from qwen_npu.patches.fixes import mtp_modelslim_unquant

    return {
        "hook_installed": child_hook.installed(),
        "sglang_before": before,
        "patched": mtp._mtp_quant_config is mtp_modelslim_unquant.mtp_quant_config_modelslim_aware,
        "states": {name: o.state for name, o in core.OUTCOMES.items()},
        "pid": os.getpid(),
    }


@pytest.mark.slow
def test_a_spawned_child_gets_the_patches_through_the_pth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(STUBS), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.delenv("QWEN_NPU_DISABLE_PATCHES", raising=False)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        report = pool.apply_async(_child_report).get(timeout=240)
    assert report["pid"] != os.getpid()
    assert report["hook_installed"] is True
    assert report["sglang_before"] == []
    assert report["patched"] is True
    assert report["states"]["mtp-modelslim-unquant"] == "applied"
    assert report["states"]["modelslim-moe-unquant-fallback"] == "applied"
