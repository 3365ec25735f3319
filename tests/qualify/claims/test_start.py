"""The start claim's judgement of a state file and a start-up log, as the engine writes them.

Against a simulator these checks are skipped (the end-to-end tests); here the state file is
written with the patches' own writer (qwen_npu.patches.state) so each check is seen to pass and
to fail.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from qwen_npu.patches import state as state_file
from qwen_npu.patches.registry import GDN_CONTRACT, PATCHES
from qwen_npu.qualify.claims import start
from qwen_npu.qualify.client import Endpoint

from ..conftest import Answerer

ROUTE = start.DECODE_PATCH
LOG = "\n".join(f"qwen_npu.entrypoint level=INFO event={ev} detail=x" for ev in start.START_EVENTS)


def _write(tmp: Path, *, states: dict[str, str] | None = None, detail: str = "",
           contract: str = "pass") -> Path:  # fmt: skip
    for info in PATCHES:
        st = (states or {}).get(info.name, "applied")
        text = detail if info.name == ROUTE else "ok"
        state_file.write_patch_state(
            info.name, st, target="module:Qual", detail=text, state_dir=tmp
        )
    state_file.write_gdn_contract(
        {link.name: {"verdict": contract, "evidence": "e"} for link in GDN_CONTRACT},
        state_dir=tmp,
    )
    return tmp


@pytest.fixture
def engine(fixture_server: Callable[[Answerer], str]) -> Endpoint:
    return Endpoint(fixture_server(lambda prompt, n: "ok"))


def _checks(engine: Endpoint, state_dir: Path, log: str | None, tmp: Path) -> dict[str, str]:
    log_file = None
    if log is not None:
        log_file = tmp / "engine.log"
        log_file.write_text(log)
    claim = start.run(engine, None, state_dir, log_file, {"engine-image": "reg/engine@sha256:x"})
    assert claim.data["versions"]["engine-image"] == "reg/engine@sha256:x"
    return {c.name: c.verdict for c in claim.checks}


def test_a_good_start_passes_every_check(engine: Endpoint, tmp_path: Path) -> None:
    state_dir = _write(tmp_path / "s", detail="rebound, route in-place: SGLang's decode calls")
    got = _checks(engine, state_dir, LOG, tmp_path)
    assert got["engine answers"] == "pass"
    for name in ("patches applied", "GDN state contract", "decode route", "driver, devices, ops"):
        assert got[name] == "pass", got


def test_each_bad_start_fails_its_check(engine: Endpoint, tmp_path: Path) -> None:
    state_dir = _write(
        tmp_path / "s", states={"mamba-scatter-ub-aware": "drifted"}, contract="fail",
        detail="wrapped, route copy: the kernel gets a K-major copy",
    )  # fmt: skip
    got = _checks(engine, state_dir, "event=driver_ok only", tmp_path)
    for name in ("patches applied", "GDN state contract", "decode route", "driver, devices, ops"):
        assert got[name] == "fail", got
    fallback = LOG + f"\nqwen_npu.patches level=WARNING event={start.FALLBACK_EVENT} route=copy"
    good = _write(tmp_path / "g", detail="route in-place")
    assert _checks(engine, good, fallback, tmp_path)["decode route"] == "fail"
