"""UB plans (engine vs predicted), and the metric catalogue against the contract, the collector
and promtool."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from qwen_npu.metrics.catalogue import CATALOGUE, PATCH_NAMES
from qwen_npu.sidecar import info as ub
from qwen_npu.sidecar.collector import registry_for
from qwen_npu.sidecar.config import load_settings
from qwen_npu.sidecar.info import UbStats
from qwen_npu.sidecar.monitor import Monitor

# The contract (docs/architecture.md), copied here: a rename must be a deliberate, visible change.
CONTRACT = {
    "qwen_npu_engine_up", "qwen_npu_engine_ready", "qwen_npu_engine_draining",
    "qwen_npu_engine_health_probe_seconds", "qwen_npu_engine_consecutive_failures",
    "qwen_npu_engine_startup_elapsed_seconds", "qwen_npu_startup_budget_seconds",
    "qwen_npu_engine_uptime_seconds", "qwen_npu_engine_restarts_total",
    "qwen_npu_engine_errors_total", "qwen_npu_build_info", "qwen_npu_patch_state",
    "qwen_npu_patch_used_by_mode",
    "qwen_npu_gdn_contract",
    "qwen_npu_ub_plan_known", "qwen_npu_ub_budget_bytes", "qwen_npu_ub_head_block_size",
    "qwen_npu_ub_tile_bytes", "qwen_npu_ub_buffered_bytes", "qwen_npu_ub_headroom_bytes",
    "qwen_npu_ub_plane_overflow", "qwen_npu_ub_plan_mismatch", "qwen_npu_spec_enabled",
    "qwen_npu_spec_info", "qwen_npu_spec_num_steps", "qwen_npu_spec_num_draft_tokens",
    "qwen_npu_canary_runs_total", "qwen_npu_canary_degeneration_score",
    "qwen_npu_canary_longest_repeat_tokens", "qwen_npu_canary_golden_prefix_ratio",
    "qwen_npu_canary_last_success_timestamp_seconds", "qwen_npu_canary_latency_seconds",
}  # fmt: skip


def write_config(directory: Path, **text_config: object) -> Path:
    body = {
        "hidden_size": 2048,
        "num_hidden_layers": 40,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "linear_num_value_heads": 32,
        "linear_num_key_heads": 16,
        "linear_value_head_dim": 128,
        "linear_key_head_dim": 128,
        "mamba_ssm_dtype": "float32",
        **text_config,
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"text_config": body}))
    return directory


def test_catalogue_is_the_contract_and_well_formed() -> None:
    names = [spec.name for spec in CATALOGUE]
    assert len(names) == len(set(names))
    assert set(names) == CONTRACT
    for spec in CATALOGUE:
        assert re.fullmatch(r"qwen_npu_[a-z0-9_]+", spec.name), spec.name
        assert spec.help and spec.unit
        assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name
        if spec.kind == "histogram":
            assert spec.name.endswith("_seconds") and list(spec.buckets) == sorted(spec.buckets)


@pytest.mark.system
def test_collector_exports_every_catalogue_series_and_promtool_accepts_it() -> None:
    # The trackers as the steps leave them: an engine that answered, restarted twice, timed out
    # three times, runs NEXTN and wrote an engine UB plan (no patch entries yet).
    monitor = Monitor(load_settings(), clock=lambda: 100.0)
    monitor.health.record("ok", monitor.clock(), 200)
    monitor.health.restarts = 2
    monitor.errors.counts["timeout"] = 3
    monitor.info.info = {"speculative_algorithm": "NEXTN"}
    monitor.info.state = {"patches": {}, "ub_plan": {"ub_bytes": 196608, "h_block_size": 1,
                          "tile_bytes": 65536, "buffered_bytes": 131072,
                          "headroom_bytes": 65536, "plane_overflow": False}}  # fmt: skip
    monitor.probe.latency.observe(0.02)
    registry = registry_for(monitor)
    first = generate_latest(registry).decode()
    text = generate_latest(registry).decode()
    assert text == first  # a scrape reads the trackers; it changes nothing
    for spec in CATALOGUE:
        for series in spec.series_names():
            assert re.search(rf"^{series}[{{ ]", text, re.M), series
    assert 'qwen_npu_engine_errors_total{kind="timeout"} 3.0' in text
    assert "qwen_npu_engine_restarts_total 2.0" in text
    assert 'qwen_npu_spec_info{algorithm="NEXTN"} 1.0' in text
    assert 'qwen_npu_ub_head_block_size{source="engine"} 1.0' in text
    assert 'qwen_npu_ub_head_block_size{source="predicted"} NaN' in text
    for patch in PATCH_NAMES:
        assert f'qwen_npu_patch_state{{patch="{patch}",state="unknown"}} 1.0' in text
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run make tools"
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_plan_from_state_file_shape() -> None:
    good = {"h_block_size": 1, "tile_bytes": 65536, "buffered_bytes": 131072,
            "ub_bytes": 196608, "plane_overflow": False}  # fmt: skip
    stats = ub.stats_from_plan(good)
    assert stats.known and stats.headroom_bytes == 65536 and stats.plane_overflow == 0.0
    for broken in (None, [], {"h_block_size": "one"}, {**good, "plane_overflow": "no"},
                   {**good, "tile_bytes": float("inf")}, {**good, "ub_bytes": True}):  # fmt: skip
        assert not ub.stats_from_plan(broken).known  # type: ignore[arg-type]


def test_predicted_plan_follows_config_tp_and_dtype(tmp_path: Path) -> None:
    model = write_config(tmp_path / "m")
    fp32 = ub.predict(model, tp_size=2, mamba_ssm_dtype=None)
    assert fp32.error is None and fp32.plan is not None
    assert (fp32.plan["h_block_size"], fp32.plan["num_heads"], fp32.plan["dtype"]) == (
        1, 16, "float32",
    )  # fmt: skip
    bf16 = ub.predict(model, tp_size=2, mamba_ssm_dtype="bfloat16")
    assert bf16.plan is not None and bf16.plan["h_block_size"] == 2
    engine = ub.stats_from_plan(fp32.plan)
    assert not ub.mismatch(engine, ub.stats_from_plan(fp32.plan))
    assert ub.mismatch(engine, ub.stats_from_plan(bf16.plan))
    assert not ub.mismatch(engine, UbStats())  # unknown is not a mismatch


@pytest.mark.parametrize(
    ("setup", "tp", "fragment"),
    [
        (lambda d: None, 1, "file not found"),
        (lambda d: write_config(d, linear_num_value_heads=None), 1, "no GDN"),
        (lambda d: write_config(d), 3, "not divisible by QWEN_NPU_TP_SIZE 3"),
        (lambda d: (d.mkdir(), (d / "config.json").write_text("{oops")), 1, "malformed JSON"),
    ],
)
def test_predicted_plan_errors_are_one_line(setup, tp: int, fragment: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = tmp_path / "m"
    setup(model)
    predicted = ub.predict(model, tp_size=tp, mamba_ssm_dtype=None)
    assert predicted.plan is None and predicted.error is not None
    assert fragment in predicted.error and "\n" not in predicted.error


def test_no_model_dir_is_unknown_not_an_error() -> None:
    predicted = ub.predict(None, 1, None)
    assert predicted.plan is None and "QWEN_NPU_MODEL_DIR" in (predicted.error or "")
    assert math.isnan(UbStats().h_block_size)
