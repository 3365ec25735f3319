"""core: the decision procedure, the kill switch and the source fingerprint."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from qwen_npu.patches import core
from qwen_npu.patches.registry import PatchInfo

INFO = PatchInfo("demo-patch", "demo:target", "pr")


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QWEN_NPU_DISABLE_PATCHES", raising=False)
    monkeypatch.delenv("QWEN_NPU_STATE_DIR", raising=False)
    monkeypatch.delitem(core.OUTCOMES, INFO.name, raising=False)


def run(**overrides: Any) -> core.Outcome:
    rebound: list[str] = []
    steps: dict[str, Any] = {
        "load": lambda: "target",
        "probe": lambda t: "needed",
        "check": lambda t: None,
        "rebind": lambda t: rebound.append(t) or "rebound",
    }
    steps.update(overrides)
    outcome = core.run(INFO, **steps)
    assert bool(rebound) == (outcome.state == "applied")
    return outcome


def test_applied() -> None:
    assert run().state == "applied"
    assert core.OUTCOMES[INFO.name].detail == "rebound"


@pytest.mark.parametrize("value", ["demo-patch", "x, demo-patch ,y", "all"])
def test_disabled(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("QWEN_NPU_DISABLE_PATCHES", value)
    loaded: list[int] = []
    outcome = run(load=lambda: loaded.append(1))
    assert outcome.state == "disabled" and not loaded


def test_other_names_do_not_disable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QWEN_NPU_DISABLE_PATCHES", "demo,patch,demo-patches")
    assert run().state == "applied"


def test_target_missing() -> None:
    def missing() -> None:
        raise core.TargetMissing("no such module")

    def broken_import() -> None:
        raise ImportError("sgl_kernel_npu")

    assert run(load=missing).detail == "no such module"
    outcome = run(load=broken_import)
    assert outcome.state == "target-missing" and "ImportError: sgl_kernel_npu" in outcome.detail


def test_upstream_fixed_wins_over_drift() -> None:
    outcome = run(probe=lambda t: "fixed", check=lambda t: "changed")
    assert outcome.state == "upstream-fixed"


def test_drifted() -> None:
    outcome = run(check=lambda t: "signature differs")
    assert (outcome.state, outcome.detail) == ("drifted", "signature differs")


def test_inconclusive_probe_still_applies_and_says_so() -> None:
    def boom(t: object) -> None:
        raise RuntimeError("no torch")

    outcome = run(probe=boom)
    assert (
        outcome.state == "applied"
        and "probe inconclusive (RuntimeError: no torch)" in outcome.detail
    )


def test_rebind_failure_is_a_state_not_a_crash() -> None:
    def fail(t: object) -> str:
        raise TypeError("read-only")

    outcome = core.run(
        INFO, load=lambda: 1, probe=lambda t: None, check=lambda t: None, rebind=fail
    )
    assert outcome.state == "drifted" and "TypeError: read-only" in outcome.detail


def test_outcome_is_logged_and_persisted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from qwen_npu.patches.state import read_state

    monkeypatch.setenv("QWEN_NPU_STATE_DIR", str(tmp_path))
    run(check=lambda t: "changed shape")
    err = capsys.readouterr().err
    assert "level=ERROR event=patch.drifted patch=demo-patch state=drifted" in err
    assert 'next="the installed SGLang differs' in err
    data = read_state(tmp_path)
    assert data is not None and data["patches"]["demo-patch"]["state"] == "drifted"


def _one(x: int) -> int:
    """Docstring."""
    return x + 1


def _one_changed(x: int) -> int:
    return x + 2


def test_fingerprint_changes_with_the_code() -> None:
    a, c = core.source_fingerprint(_one), core.source_fingerprint(_one_changed)
    assert a is not None and len(a) == 64
    assert c is not None and a != c
    assert core.source_fingerprint(len) is None  # no Python source
    assert core.parameter_names(_one) == ("x",)


def test_fingerprint_same_body_same_hash(tmp_path: Path) -> None:
    import importlib.util

    src_a = "def f(x):\n    '''doc'''\n    return x + 1\n"
    src_b = "def f(x):\n    # comment\n    return (x +\n            1)\n"
    src_c = "def f(x):\n    return x + 2\n"
    hashes = []
    for i, src in enumerate((src_a, src_b, src_c)):
        path = tmp_path / f"m{i}.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(f"fp_m{i}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        hashes.append(core.source_fingerprint(module.f))
    assert hashes[0] == hashes[1]  # docstring, comment and layout do not count
    assert hashes[0] != hashes[2]  # the code does


def test_pin_mismatch_messages() -> None:
    fp = core.source_fingerprint(_one)
    assert fp is not None
    assert core.pin_mismatch(core.Pin("demo", "_one", ("x",), fp), _one) is None
    wrong_params = core.pin_mismatch(core.Pin("demo", "_one", ("y",), fp), _one)
    assert "signature ('x',) differs" in (wrong_params or "")
    wrong_code = core.pin_mismatch(core.Pin("demo", "_one", ("x",), "0" * 64), _one)
    assert "source fingerprint" in (wrong_code or "")


def test_swapped_restores_and_removes() -> None:
    obj = SimpleNamespace(a=1)
    with core.swapped(obj, a=2, b=3):
        assert (obj.a, obj.b) == (2, 3)
    assert obj.a == 1 and not hasattr(obj, "b")


def test_a_misspelt_name_is_warned_about_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(core, "_warned_unknown", set())
    monkeypatch.setenv("QWEN_NPU_DISABLE_PATCHES", "mamba-scatter-ub-awre")
    assert run().state == "applied"
    assert run().state == "applied"
    err = capsys.readouterr().err
    assert err.count("event=patch.unknown_disable_name names=mamba-scatter-ub-awre") == 1
