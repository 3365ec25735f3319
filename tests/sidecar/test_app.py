"""The app over a fake engine: endpoints, /status, /metrics, and a misbehaving engine."""

from __future__ import annotations

import gzip
import json
import math
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from qwen_npu.metrics.catalogue import CATALOGUE, PATCH_NAMES
from qwen_npu.processes import wait_until
from tests.sidecar.conftest import FakeEngine, fake_client, metric
from tests.sidecar.test_ub_and_catalogue import write_config


def test_healthy_engine_passes_all_three_probes(client: TestClient) -> None:
    wait_until(lambda: client.get("/readyz").status_code == 200, what="/readyz 200")
    for path in ("/startupz", "/readyz", "/livez"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.json()["status"] == "ok"
    assert metric(client, "qwen_npu_engine_up") == 1.0
    assert metric(client, "qwen_npu_engine_ready") == 1.0
    assert metric(client, "qwen_npu_engine_health_probe_seconds_count") >= 1


@pytest.mark.system
def test_metrics_page_has_every_catalogue_series_and_passes_promtool(client: TestClient) -> None:
    wait_until(lambda: client.get("/readyz").status_code == 200, what="/readyz 200")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    for spec in CATALOGUE:
        for series in spec.series_names():
            assert f"\n{series}" in response.text, series
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run make tools"
    result = subprocess.run(
        [promtool, "check", "metrics"], input=response.text, capture_output=True, text=True,
        timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert client.get("/metrics", follow_redirects=False).status_code == 200  # no redirect


def test_spec_settings_from_server_info(client: TestClient, fake: FakeEngine) -> None:
    wait_until(lambda: metric(client, "qwen_npu_spec_enabled") == 1.0, what="spec enabled")
    assert metric(client, "qwen_npu_spec_info", algorithm="NEXTN") == 1.0
    assert metric(client, "qwen_npu_spec_num_steps") == 3.0
    assert metric(client, "qwen_npu_spec_num_draft_tokens") == 4.0
    status = client.get("/status").json()["spec"]
    assert status["server_info"]["avg_spec_accept_length_lifetime"] == 2.5


def test_canary_ok_on_clean_output(client: TestClient) -> None:
    wait_until(
        lambda: metric(client, "qwen_npu_canary_runs_total", result="ok") >= 1, what="canary ok"
    )
    assert metric(client, "qwen_npu_canary_degeneration_score") < 0.1
    assert math.isnan(metric(client, "qwen_npu_canary_golden_prefix_ratio"))  # no golden
    assert metric(client, "qwen_npu_canary_last_success_timestamp_seconds") > time.time() - 60
    assert metric(client, "qwen_npu_canary_latency_seconds_count") >= 1


def test_missing_state_file_is_unknown_then_a_valid_one_is_read(client: TestClient) -> None:
    for patch in PATCH_NAMES:
        assert metric(client, "qwen_npu_patch_state", patch=patch, state="unknown") == 1.0
    assert metric(client, "qwen_npu_ub_plan_known", source="engine") == 0.0
    state_dir: Path = client.state_dir  # type: ignore[attr-defined]
    plan = {"h_block_size": 1, "tile_bytes": 65536, "buffered_bytes": 131072,
            "ub_bytes": 196608, "headroom_bytes": 65536, "fits": True, "plane_overflow": False,
            "cache_shape": [30, 9, 4, 16, 128, 128]}  # fmt: skip
    state = {
        "schema_version": 1,
        "updated_at": time.time(),
        "qwen_npu_version": "0.1.0",
        "sglang_version": "0.5.23",
        "patches": {
            "modelslim-moe-unquant-fallback": {"state": "applied"},
            "mtp-modelslim-unquant": {"state": "disabled"},
            "mamba-scatter-ub-aware": {"state": "something-new"},
            "gdn-decode-state-layout": {"state": "target-missing", "used_by_mode": False},
        },
        "ub_plan": plan,
    }
    (state_dir / "state.json").write_text(json.dumps(state))
    wait_until(
        lambda: metric(client, "qwen_npu_ub_plan_known", source="engine") == 1.0,
        what="engine UB plan read",
    )
    assert metric(client, "qwen_npu_ub_head_block_size", source="engine") == 1.0
    assert metric(client, "qwen_npu_ub_headroom_bytes", source="engine") == 65536
    p = "modelslim-moe-unquant-fallback"
    assert metric(client, "qwen_npu_patch_state", patch=p, state="applied") == 1.0
    assert metric(client, "qwen_npu_patch_state", patch=p, state="unknown") == 0.0
    p = "mtp-modelslim-unquant"
    assert metric(client, "qwen_npu_patch_state", patch=p, state="disabled") == 1.0
    p = "mamba-scatter-ub-aware"  # a state this sidecar does not know reads as unknown
    assert metric(client, "qwen_npu_patch_state", patch=p, state="unknown") == 1.0
    assert metric(client, "qwen_npu_build_info", qwen_npu_version="0.1.0",
                  sglang_version="0.5.23") == 1.0  # fmt: skip
    # A patch the engine's mode does not run: the metric and /status say so.
    p = "gdn-decode-state-layout"
    assert metric(client, "qwen_npu_patch_used_by_mode", patch=p) == 0.0
    details = client.get("/status").json()["patches"]["details"]
    assert details[p]["used_by_mode"] is False
    assert details["modelslim-moe-unquant-fallback"]["used_by_mode"] is None  # not written
    # Corrupt it: back to unknown, no 500 anywhere.
    (state_dir / "state.json").write_text('{"schema_version": 1, "patches": {tru')
    wait_until(
        lambda: metric(client, "qwen_npu_ub_plan_known", source="engine") == 0.0,
        what="corrupt state file -> unknown",
    )
    assert metric(client, "qwen_npu_patch_state", patch=p, state="unknown") == 1.0
    assert client.get("/status").json()["patches"]["state_file_readable"] is False
    assert client.get("/status").status_code == 200


def test_status_is_json_with_everything_and_no_secret(fake: FakeEngine, tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    with fake_client(fake, engine_api_key_file=key, canary_interval_s=0) as c:
        wait_until(lambda: c.get("/readyz").status_code == 200, what="ready")
        body = c.get("/status").json()
        assert set(body) == {"probes", "engine", "build", "patches", "ub", "spec", "canary",
                             "settings"}  # fmt: skip
        assert body["probes"]["readiness"] == {"status": "ok", "reason": "engine healthy"}
        assert body["canary"]["enabled"] is False
        assert "s3cret" not in json.dumps(body)
    assert "Bearer s3cret" in fake.auth_headers


def test_predicted_plan_and_mismatch(fake: FakeEngine, tmp_path: Path) -> None:
    model = write_config(tmp_path / "model")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    engine_plan = {"h_block_size": 2, "tile_bytes": 131072, "buffered_bytes": 262144,
                   "ub_bytes": 196608, "plane_overflow": False}  # fmt: skip
    (state_dir / "state.json").write_text(
        json.dumps({"schema_version": 1, "patches": {}, "ub_plan": engine_plan})
    )
    with fake_client(fake, model_dir=model, tp_size=2, state_dir=state_dir) as c:
        assert metric(c, "qwen_npu_ub_plan_known", source="predicted") == 1.0
        assert metric(c, "qwen_npu_ub_head_block_size", source="predicted") == 1.0
        wait_until(lambda: metric(c, "qwen_npu_ub_plan_mismatch") == 1.0, what="mismatch")
        assert metric(c, "qwen_npu_ub_headroom_bytes", source="engine") == 196608 - 262144
        assert c.get("/status").json()["ub"]["mismatch"] is True


@pytest.mark.parametrize(
    ("setup", "kind"),
    [
        (lambda f: setattr(f, "server_info_body", b"x" * 300_000), "too_large"),
        (
            lambda f: (
                setattr(f, "server_info_body", b"x" * 10),
                f.server_info_headers.update({"content-length": "99999999"}),
            ),
            "too_large",
        ),
        (  # a gzip bomb: 300 bytes on the wire, 3 MB decoded
            lambda f: (
                setattr(f, "server_info_body", gzip.compress(b"0" * 3_000_000)),
                f.server_info_headers.update({"content-encoding": "gzip"}),
            ),
            "too_large",
        ),
        (lambda f: setattr(f, "server_info_body", b"\xff\xfe not utf-8"), "malformed"),
        (lambda f: setattr(f, "server_info_body", b"[1, 2"), "malformed"),
        (lambda f: setattr(f, "server_info_body", b'"a string"'), "malformed"),
        (lambda f: setattr(f, "generate_text", None), "malformed"),
        (lambda f: setattr(f, "generate_status", 500), "status"),
        (lambda f: setattr(f, "health_status", 500), "status"),
        (lambda f: setattr(f, "health_delay_s", 5.0), "timeout"),
    ],
)
def test_bad_engine_answers_are_counted_never_fatal(setup, kind: str) -> None:  # type: ignore[no-untyped-def]
    fake = FakeEngine()
    setup(fake)
    with fake_client(fake, max_response_bytes=200_000) as c:
        wait_until(
            lambda: metric(c, "qwen_npu_engine_errors_total", kind=kind) >= 1,
            what=f"engine_errors_total{{kind={kind}}} counted",
        )
        for path in ("/startupz", "/readyz", "/livez", "/status", "/metrics"):
            assert c.get(path).status_code in (200, 503), path


def test_probes_answer_while_an_engine_probe_is_pending() -> None:
    fake = FakeEngine()
    with fake_client(fake, health_timeout_s=120.0) as c:
        wait_until(lambda: c.get("/readyz").status_code == 200, what="ready")
        fake.health_delay_s = 600.0  # the next engine probe hangs (its timeout is 120 s)
        wait_until(lambda: fake.health_in_flight == 1, what="an engine probe is pending")
        started = fake.calls["/health_generate"]
        for _ in range(3):
            for path in ("/startupz", "/readyz", "/livez", "/metrics", "/status"):
                assert c.get(path).status_code in (200, 503)
        # Every answer came while that same engine probe was still pending: the endpoints never
        # wait for the engine (no wall-clock bound needed).
        assert fake.health_in_flight == 1
        assert fake.calls["/health_generate"] == started


def test_a_hung_engine_fails_liveness_and_heals() -> None:
    fake = FakeEngine()
    with fake_client(fake, health_timeout_s=2.0) as c:
        wait_until(lambda: c.get("/readyz").status_code == 200, what="ready")
        fake.health_delay_s = 30.0  # hangs far beyond the probe timeout
        wait_until(lambda: c.get("/livez").status_code == 503, what="livez fails (2 x 2 s)")
        for path in ("/startupz", "/readyz", "/livez", "/metrics", "/status"):
            assert c.get(path).status_code in (200, 503)
        assert "timed out" in c.get("/livez").json()["reason"]
        assert c.get("/readyz").status_code == 503
        assert c.get("/startupz").status_code == 200
        fake.health_delay_s = 0.0
        wait_until(lambda: c.get("/livez").status_code == 200, what="healed")


def test_refusing_engine_after_ready_is_a_restart() -> None:
    fake = FakeEngine()
    with fake_client(fake, canary_interval_s=0) as c:
        wait_until(lambda: c.get("/readyz").status_code == 200, what="ready")
        fake.refuse = True
        wait_until(lambda: c.get("/livez").status_code == 503, what="livez 503")
        assert c.get("/startupz").status_code == 503
        assert metric(c, "qwen_npu_engine_restarts_total") == 1.0
        assert metric(c, "qwen_npu_engine_up") == 0.0
        assert metric(c, "qwen_npu_engine_errors_total", kind="connect") == 1.0
        fake.refuse = False
        wait_until(lambda: c.get("/startupz").status_code == 200, what="started")
        assert c.get("/livez").status_code == 200


def test_canary_off_never_generates() -> None:
    fake = FakeEngine()
    with fake_client(fake, canary_interval_s=0) as c:
        wait_until(lambda: c.get("/readyz").status_code == 200, what="ready")
        # Long enough for several canary intervals (0.15 s) to pass, counted in health probes.
        probes = fake.calls["/health_generate"]
        wait_until(lambda: fake.calls["/health_generate"] >= probes + 8, what="8 more probes")
        assert fake.calls.get("/generate", 0) == 0
        assert [loop.name for loop in c.app.state.monitor.loop_plan()] == ["health", "info"]
        assert (
            sum(
                metric(c, "qwen_npu_canary_runs_total", result=r)
                for r in ("ok", "degenerated", "golden_mismatch", "error")
            )
            == 0
        )


def test_canary_golden_file(tmp_path: Path) -> None:
    fake = FakeEngine()
    golden = tmp_path / "golden.txt"
    suffix = " and then something else entirely, much longer than the part that matches"
    golden.write_text(fake.generate_text[:30] + suffix + "\n")
    expected = 30 / (30 + len(suffix))
    with fake_client(fake, canary_golden_file=golden) as c:
        wait_until(
            lambda: metric(c, "qwen_npu_canary_runs_total", result="golden_mismatch") >= 1,
            what="golden mismatch",
        )
        assert metric(c, "qwen_npu_canary_golden_prefix_ratio") == pytest.approx(expected)
        assert c.get("/status").json()["canary"]["last"]["golden_prefix_chars"] == 30


def test_gdn_contract_verdicts_from_the_state_file(fake: FakeEngine, tmp_path: Path) -> None:
    """qwen_npu_gdn_contract{link,verdict}: 1 for the current verdict; unreported links unknown."""
    from qwen_npu.metrics.catalogue import GDN_LINKS, GDN_VERDICTS

    state_dir = tmp_path / "state"
    state_dir.mkdir()
    with fake_client(fake, state_dir=state_dir, canary_interval_s=0) as c:
        for link in GDN_LINKS:  # no state file yet: every link unknown
            assert metric(c, "qwen_npu_gdn_contract", link=link, verdict="unknown") == 1.0
            assert metric(c, "qwen_npu_gdn_contract", link=link, verdict="fail") == 0.0
        contract = {
            "pool_layout": {"verdict": "pass", "evidence": "memory_pool.py:120: V-major"},
            "verify_op": {"verdict": "fail", "evidence": "verify op bf16 only; state float32"},
            "mover": {"verdict": "sideways", "evidence": "a verdict this sidecar does not know"},
        }
        state = {"schema_version": 1, "patches": {}, "gdn_contract": contract}
        (state_dir / "state.json").write_text(json.dumps(state))
        wait_until(
            lambda: metric(c, "qwen_npu_gdn_contract", link="verify_op", verdict="fail") == 1.0,
            what="the GDN verdicts read",
        )
        assert metric(c, "qwen_npu_gdn_contract", link="pool_layout", verdict="pass") == 1.0
        assert metric(c, "qwen_npu_gdn_contract", link="pool_layout", verdict="unknown") == 0.0
        for link in ("mover", "prefill_op", "decode_kernel", "ssm_dtype"):  # unknown or absent
            assert metric(c, "qwen_npu_gdn_contract", link=link, verdict="unknown") == 1.0
        for link in GDN_LINKS:  # exactly one verdict per link
            assert sum(metric(c, "qwen_npu_gdn_contract", link=link, verdict=v)
                       for v in GDN_VERDICTS) == 1.0  # fmt: skip
        details = c.get("/status").json()["patches"]["gdn_contract"]
        assert details["verify_op"] == {
            "verdict": "fail", "evidence": "verify op bf16 only; state float32"
        }  # fmt: skip
        assert details["ssm_dtype"] == {"verdict": "unknown", "evidence": None}
