"""End to end with a real Prometheus on 127.0.0.1.

Prometheus (Debian's 2.42) scrapes, every second, the SGLang-protocol simulator (as the engine),
the real sidecar (`qwen-npu sidecar`, with a state file and a config.json) and a fixture NPU
exporter, and loads the alert rules the chart renders. After a short load, every dashboard
panel's PromQL is evaluated through /api/v1/query and must return series, and every alert
expression must parse: the ones the fixture stack is dialled to trip (slow TTFT/TPOT against
tightened thresholds, MTP acceptance 1.2, garbled canary, a drifted patch, an overflowing UB plan
that differs from the prediction, an unhealthy chip, a full HBM) must return series, the others
must return none while every metric selector they read does.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from qwen_npu import processes
from qwen_npu.hardware.ub_plan import plan
from qwen_npu.observability import alerts, generate
from qwen_npu.observability.generate import metric_names
from qwen_npu.processes import free_port
from qwen_npu.sim.testing import running_sim

from .conftest import NAMESPACE, render_chart, rule_spec
from .npu_fixture import npu_exporter

pytestmark = pytest.mark.system  # needs a tool `make test` installs (docs: make test-fast)

POD = "qwen-npu-0"
WINDOW = "30s"  # stands in for Grafana's $__rate_interval
DASHBOARD_VARS = {
    "$__rate_interval": WINDOW,
    "$namespace": NAMESPACE,
    "$pod": POD,
    "$model_name": ".*",
}
# Thresholds tightened so that the simulator's 50 ms TTFT and ~10 ms TPOT breach the SLOs.
E2E_THRESHOLDS = {"ttftP99Seconds": 0.001, "tpotP99Seconds": 0.001}

FIRING = {
    "QwenNpuTTFTSLOBurn",
    "QwenNpuTPOTSLOBurn",
    "QwenNpuSpecAcceptanceCollapse",
    "QwenNpuCanaryDegenerated",
    "QwenNpuPatchNotApplied",
    "QwenNpuGdnContractFailed",
    "QwenNpuUbPlanOverflow",
    "QwenNpuUbPlanMismatch",
    "QwenNpuChipUnhealthy",
    "QwenNpuHbmNearFull",
}
# Healthy here by construction: engine up and ready, started long ago, queue not growing.
QUIET = {
    "QwenNpuEngineDown",
    "QwenNpuEngineNotReady",
    "QwenNpuStartupSlow",
    "QwenNpuQueueGrowing",
    "QwenNpuReplicaStuckDraining",
}
# No router runs in this stack: its smg_* series come from the real router in tests/proofs
# (which checks it exports every series of metrics/external.py).
NO_ROUTER = {"QwenNpuRouterWorkerEjected"}
_NO_ROUTER_PANEL = "no router in this stack; tests/proofs scrapes the real router"
# Panels that may legitimately come back empty on this stack, with the reason.
MAY_BE_EMPTY: dict[str, str] = {
    "Router workers healthy": _NO_ROUTER_PANEL,
    "Router requests and retries": _NO_ROUTER_PANEL,
    "Router circuit breakers": _NO_ROUTER_PANEL,
}

MODEL_CONFIG = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 40,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "full_attention_interval": 4,
    "linear_num_value_heads": 32,
    "linear_num_key_heads": 16,
    "linear_value_head_dim": 128,
    "linear_key_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "mamba_ssm_dtype": "float32",
    "mtp_num_hidden_layers": 1,
    "num_experts": 256,
    "num_experts_per_tok": 8,
    "vocab_size": 248320,
}


def _chip(chip_id: str, namespace: str, pod: str) -> dict[str, str]:
    return {
        "id": chip_id,
        "model_name": "Ascend910B3",
        "namespace": namespace,
        "pod_name": pod,
        "container_name": "engine",
    }


CHIPS = [
    (
        _chip("0", NAMESPACE, POD),
        {
            "npu_chip_info_utilization": 71,
            "npu_chip_info_hbm_used_memory": 40000,
            "npu_chip_info_hbm_total_memory": 65536,
            "npu_chip_info_temperature": 55,
            "npu_chip_info_power": 210,
            "npu_chip_info_health_status": 1,
        },
    ),
    (
        _chip("1", NAMESPACE, POD),
        {
            "npu_chip_info_utilization": 69,
            "npu_chip_info_hbm_used_memory": 63000,
            "npu_chip_info_hbm_total_memory": 65536,
            "npu_chip_info_temperature": 57,
            "npu_chip_info_power": 205,
            "npu_chip_info_health_status": 0,
        },
    ),
    (_chip("2", "other-team", "someone-else-0"), {"npu_chip_info_health_status": 1}),
]


def _write_state(state_dir: Path) -> None:
    now = time.time()
    states = {
        "modelslim-moe-unquant-fallback": "applied",
        "mtp-modelslim-unquant": "applied",
        "mamba-scatter-ub-aware": "drifted",
    }
    # The engine planned for 256x256 fp32 state: one plane, double-buffered, overflows the UB,
    # and differs from the 128x128 plan that config.json predicts.
    ub = plan(256, 256, "float32", num_heads=16).as_dict()
    ub.update({"cache_shape": [40, 9, 4, 16, 256, 256], "pid": 1, "updated_at": now})
    state = {
        "schema_version": 1,
        "updated_at": now,
        "qwen_npu_version": "0.1.0",
        "sglang_version": "0.5.23",
        "patches": {
            name: {"state": s, "target": "m:f", "detail": "", "pid": 1, "updated_at": now}
            for name, s in states.items()
        },
        "ub_plan": ub,
        # The SSM state contract as E2's check writes it: verify_op fails, ssm_dtype unread.
        "gdn_contract": {
            "pool_layout": {"verdict": "pass", "evidence": "pool.py:1: V-major"},
            "verify_op": {"verdict": "fail", "evidence": "verify.py:1: bf16 only, state float32"},
            "ssm_dtype": {"verdict": "unknown", "evidence": "no command line here"},
        },
    }
    (state_dir / "state.json").write_text(json.dumps(state))


def _load(base: str, seconds: float, workers: int = 6) -> int:
    """Closed-loop /generate requests, streaming and not, for a few seconds."""
    done = [0]
    stop = time.monotonic() + seconds
    lock = threading.Lock()

    def worker(i: int) -> None:
        with httpx.Client(timeout=20.0) as client:
            while time.monotonic() < stop:
                body = {
                    "text": f"request {i} tell me about Ascend",
                    "sampling_params": {"max_new_tokens": 24, "temperature": 0},
                    "stream": i % 2 == 0,
                }
                with client.stream("POST", f"{base}/generate", json=body) as r:
                    for _ in r.iter_bytes():
                        pass
                with lock:
                    done[0] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 30)
    return done[0]


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _timestamp(rfc3339: str) -> float:
    """Prometheus' RFC 3339 time (up to nanoseconds) as Unix seconds."""
    m = _RFC3339.match(rfc3339)
    assert m, f"not an RFC 3339 time: {rfc3339!r}"
    zone = "+00:00" if m[3] == "Z" else m[3]
    return datetime.fromisoformat(m[1] + zone).timestamp() + float(m[2] or 0)


def _last_scrapes(prom: str) -> list[float] | None:
    """Every target's last scrape time, once every target is up (else None)."""
    targets = httpx.get(f"{prom}/api/v1/targets", timeout=10.0).json()["data"]["activeTargets"]
    if not targets or any(t["health"] != "up" for t in targets):
        return None
    return [_timestamp(t["lastScrape"]) for t in targets]


def _last_evaluations(prom: str) -> list[float] | None:
    """Every rule group's last evaluation time (None before the groups are loaded)."""
    groups = httpx.get(f"{prom}/api/v1/rules", timeout=10.0).json()["data"]["groups"]
    return [_timestamp(g["lastEvaluation"]) for g in groups] or None


def _scraped_then_evaluated(prom: str, after: float, what: str) -> float:
    """Wait until every target was scraped after ``after``, then until every rule group was
    evaluated after the latest of those scrapes; return that scrape time. (Targets and groups run
    at their own offsets, so "all evaluations after all scrapes" need never hold at one moment:
    the two waits come one after the other.)"""
    scraped = processes.wait_until(
        lambda: (s := _last_scrapes(prom)) is not None and min(s) > after and max(s),
        what=f"a scrape of every target after {what}",
    )
    processes.wait_until(
        lambda: (e := _last_evaluations(prom)) is not None and min(e) > scraped,
        what=f"every rule group evaluated after {what}'s scrapes",
    )
    return float(scraped)


def _wait_for_scrapes_and_evaluations(prom: str, after: float) -> None:
    """Wait (for events, not a fixed time) until every target was scraped twice after ``after``
    and every rule group evaluated after that: the load's last numbers reached the rules."""
    first = _scraped_then_evaluated(prom, after, "the load")
    _scraped_then_evaluated(prom, first, "the first scrape after the load")


@dataclass
class Stack:
    prom: str
    rules: dict[str, dict[str, Any]]
    requests: int
    logs: dict[str, Path] = field(default_factory=dict)

    def query(self, expr: str) -> dict[str, Any]:
        r = httpx.get(f"{self.prom}/api/v1/query", params={"query": expr}, timeout=10.0)
        body: dict[str, Any] = r.json()
        return body


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, prometheus_bin: str) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("e2e")
    state_dir, model_dir = tmp / "state", tmp / "model"
    state_dir.mkdir()
    model_dir.mkdir()
    _write_state(state_dir)
    (model_dir / "config.json").write_text(json.dumps(MODEL_CONFIG))

    rendered = render_chart({"monitoring": {"prometheusRule": {"thresholds": E2E_THRESHOLDS}}})
    spec = rule_spec(rendered)
    rules_path = tmp / "rules.yaml"
    rules_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    rules = {r["alert"]: r for g in spec["groups"] for r in g["rules"] if "alert" in r}

    sim_cfg = {
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": 3,
        "speculative_num_draft_tokens": 4,
        "accept_length": 1.2,
        "garbled": True,
        "itl_ms": 5,
        "ttft_ms": 50,
        "tp_size": 2,
    }
    with (
        running_sim(**sim_cfg) as engine,
        npu_exporter(CHIPS) as npu_port,
    ):
        sidecar_port, prom_port = free_port(), free_port()
        env = {"QWEN_NPU_CANARY_INTERVAL_S": "1", "QWEN_NPU_LOG_LEVEL": "warning"}
        sidecar_cmd = [
            sys.executable, "-m", "qwen_npu", "sidecar",
            "--engine-url", engine, "--host", "127.0.0.1", "--port", str(sidecar_port),
            "--state-dir", str(state_dir), "--model-dir", str(model_dir), "--tp-size", "2",
        ]  # fmt: skip
        labels = {"namespace": NAMESPACE, "pod": POD}
        engine_target = engine.removeprefix("http://")
        prom_cfg = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules_path)],
            "scrape_configs": [
                {
                    "job_name": "qwen-npu-engine",
                    "static_configs": [{"targets": [engine_target], "labels": labels}],
                },
                {
                    "job_name": "qwen-npu-sidecar",
                    "static_configs": [
                        {"targets": [f"127.0.0.1:{sidecar_port}"], "labels": labels}
                    ],
                },
                {
                    "job_name": "npu-exporter",
                    "honor_labels": True,
                    "static_configs": [{"targets": [f"127.0.0.1:{npu_port}"]}],
                },
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(prom_cfg))
        prom_cmd = [
            prometheus_bin,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--log.level=warn",
        ]
        logs = {"sidecar": tmp / "sidecar.log", "prometheus": tmp / "prometheus.log"}
        prom = f"http://127.0.0.1:{prom_port}"
        with (
            processes.running(
                sidecar_cmd,
                log=logs["sidecar"],
                env=env,
                ready_url=f"http://127.0.0.1:{sidecar_port}/livez",
                what="sidecar",
            ),
            processes.running(
                prom_cmd, log=logs["prometheus"], ready_url=f"{prom}/-/ready", what="prometheus"
            ),
        ):
            requests = _load(engine, seconds=8.0)
            _wait_for_scrapes_and_evaluations(prom, after=time.time())
            yield Stack(prom, rules, requests, logs)


def _fill(expr: str) -> str:
    for var, value in DASHBOARD_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, expr
    return expr


def _panel_queries() -> list[tuple[str, str, str]]:
    out = []
    for filename, model in generate.dashboard_models().items():
        for title, expr in generate.dashboard_queries(model):
            out.append((filename, title, expr))
    return out


def test_every_target_is_scraped(stack: Stack) -> None:
    assert stack.requests >= 20
    body = httpx.get(f"{stack.prom}/api/v1/targets", timeout=10.0).json()
    health = {t["labels"]["job"]: t["health"] for t in body["data"]["activeTargets"]}
    assert health == {"qwen-npu-engine": "up", "qwen-npu-sidecar": "up", "npu-exporter": "up"}


def test_every_dashboard_query_returns_series(stack: Stack) -> None:
    empty, failed = [], []
    for filename, title, expr in _panel_queries():
        body = stack.query(_fill(expr))
        if body.get("status") != "success":
            failed.append(f"{filename} {title!r}: {body.get('error')} in {expr}")
        elif not body["data"]["result"] and title not in MAY_BE_EMPTY:
            empty.append(f"{filename} {title!r}: {expr}")
    assert not failed, "\n".join(failed)
    assert not empty, "panels without series:\n" + "\n".join(empty)


def test_every_dashboard_variable_lists_values(stack: Stack) -> None:
    """Grafana's label_values(selector, label) would offer at least one value here."""
    for filename, model in generate.dashboard_models().items():
        for var, selector, label in generate.variable_selectors(model):
            expr = f"count by ({label}) ({_fill(selector)})"
            result = stack.query(expr)["data"]["result"]
            values = {r["metric"].get(label, "") for r in result}
            assert values - {""}, f"{filename} variable {var}: {expr} lists no {label}"


def test_alert_expressions_fire_exactly_where_the_stack_is_broken(stack: Stack) -> None:
    assert set(stack.rules) == FIRING | QUIET | NO_ROUTER
    wrong = []
    for name, rule in stack.rules.items():
        body = stack.query(rule["expr"])
        assert body.get("status") == "success", f"{name}: {body.get('error')}"
        fired = bool(body["data"]["result"])
        if fired != (name in FIRING):
            wrong.append(f"{name}: {'fires' if fired else 'quiet'}: {rule['expr']}")
    assert not wrong, "\n".join(wrong)


_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?")


def test_quiet_alerts_read_series_that_exist(stack: Stack) -> None:
    """A quiet alert must be quiet because the stack is healthy, not because it reads nothing."""
    missing = []
    for name in sorted(QUIET):
        expr = stack.rules[name]["expr"]
        names = metric_names(expr)
        for m in _SELECTOR.finditer(expr):
            if m.group(1) in names:
                selector = m.group(1) + (m.group(2) or "")
                if not stack.query(f"count({selector})")["data"]["result"]:
                    missing.append(f"{name}: {selector}")
    assert not missing, missing


def test_prometheus_loads_and_evaluates_every_rule(stack: Stack) -> None:
    body = httpx.get(f"{stack.prom}/api/v1/rules", timeout=10.0).json()
    rules = [r for g in body["data"]["groups"] for r in g["rules"]]
    names = {a.name for a in alerts.all_alerts()} | {r.record for r in alerts.all_recordings()}
    assert {r["name"] for r in rules} == names
    bad = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert not bad, bad
    active = httpx.get(f"{stack.prom}/api/v1/alerts", timeout=10.0).json()["data"]["alerts"]
    assert {a["labels"]["alertname"] for a in active} == FIRING
    for a in active:
        assert a["annotations"]["runbook_url"].endswith("#" + a["labels"]["alertname"].lower())
