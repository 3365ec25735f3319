"""Rollouts without dropped requests, chart side (issue 15.2): the engine pod's drain sequence and
the router (service discovery, health checks, retries, circuit breaker, metrics, PDB, API key)."""

from __future__ import annotations

import math
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

from tools import chart as chart_tool
from tools.paths import REPO
from tools.proofs.failover import unknown_flags

ROUTER_BIN = Path(os.environ.get("QWEN_NPU_ROUTER_BIN", str(REPO / ".venv-router" / "bin" / "smg")))
ROUTER = chart_tool.values_from(chart_tool.CI_DIR / "router-values.yaml")


def _drain_seconds(values: dict[str, Any]) -> int:
    d = chart_tool.merged_values(values)["engine"]["drain"]
    longest = math.ceil(d["worstTtftSeconds"] + d["maxOutputTokens"] * d["worstTpotSeconds"])
    return int(d["preStopSeconds"] + longest + d["exitSeconds"])


def _router(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = chart_tool.find(docs, "Deployment", "qwen-npu-router")
    return dict(deployment)


def _router_args(docs: list[dict[str, Any]]) -> list[str]:
    return [str(a) for a in _router(docs)["spec"]["template"]["spec"]["containers"][0]["args"]]


def _pairs(args: list[str]) -> dict[str, str]:
    return {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}


def test_should_drain_in_order_when_an_engine_pod_goes(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    """Sidecar first up and last down (native sidecar), the engine pauses before SIGTERM, and the
    grace period covers pause + longest request + exit."""
    for name in ("ci-default", "qwen3.5-397b-a17b-w8a8-mtp-on"):
        docs = rendered_scenarios[name]
        for role, template in chart_tool.pod_templates(chart_tool.engine_workload(docs)):
            spec = template["spec"]
            engine = chart_tool.container(template, "engine")
            assert engine is not None
            assert spec["terminationGracePeriodSeconds"] == _drain_seconds({}) == 470
            if role == "worker":
                assert "lifecycle" not in engine
                continue
            assert engine["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "10"]
            init = [c["name"] for c in spec["initContainers"]]
            assert init[-1] == "sidecar" and init.index("sidecar") > init.index("preflight")
            sidecar = spec["initContainers"][-1]
            assert sidecar["restartPolicy"] == "Always"
            # The engine's probes still go to the sidecar's port.
            assert (
                engine["readinessProbe"]["httpGet"]["port"] == sidecar["ports"][0]["containerPort"]
            )


def test_should_compute_grace_from_drain_limits_when_left_at_zero() -> None:
    values = {"engine": {"drain": {"maxOutputTokens": 1000, "worstTpotSeconds": 0.05}}}
    docs = chart_tool.render_docs(values)
    spec = chart_tool.engine_workload(docs)["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 10 + 80 + 20 == _drain_seconds(values)
    # An explicit grace at least as long as the drain is kept.
    docs = chart_tool.render_docs({"engine": {"terminationGracePeriodSeconds": 900}})
    spec = chart_tool.engine_workload(docs)["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 900


def test_should_fail_in_one_line_when_grace_is_shorter_than_the_drain() -> None:
    with pytest.raises(helm.HelmRenderError) as caught:
        chart_tool.render({"engine": {"terminationGracePeriodSeconds": 120}})
    message = str(caught.value)
    lines = [line for line in message.splitlines() if "terminationGracePeriodSeconds" in line]
    assert len(lines) == 1
    assert "engine.terminationGracePeriodSeconds (120) is shorter than the drain (470 s" in lines[0]


def test_should_find_replicas_by_selector_when_router_enabled(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered_scenarios["ci-router"]
    router = _router(docs)
    args = _router_args(docs)
    pairs = _pairs(args)
    assert "--service-discovery" in args and "--worker-urls" not in args
    assert pairs["--service-discovery-namespace"] == "llm"
    assert pairs["--service-discovery-port"] == "30000"
    selector = args[args.index("--selector") + 1 : args.index("--service-discovery-port")]
    engine_labels = chart_tool.engine_workload(docs)["spec"]["template"]["metadata"]["labels"]
    assert selector and all(engine_labels[k] == v for k, v in (s.split("=", 1) for s in selector))
    assert "qwen-npu.io/role=leader" in selector
    (role,) = chart_tool.find(docs, "Role", "qwen-npu-router")
    assert {"list", "watch"} <= set(role["rules"][0]["verbs"])
    assert router["spec"]["template"]["spec"]["automountServiceAccountToken"] is True


def test_should_render_health_retry_and_breaker_values_when_router_enabled(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    pairs = _pairs(_router_args(rendered_scenarios["ci-router"]))
    assert {k: pairs[k] for k in pairs if k.startswith(("--health", "--retry", "--cb-"))} == {
        "--health-check-endpoint": "/health",
        "--health-check-interval-secs": "5",
        "--health-check-timeout-secs": "5",
        "--health-failure-threshold": "3",
        "--health-success-threshold": "2",
        "--retry-max-retries": "3",
        "--retry-initial-backoff-ms": "50",
        "--retry-max-backoff-ms": "2000",
        "--retry-backoff-multiplier": "1.5",
        "--retry-jitter-factor": "0.2",
        "--cb-failure-threshold": "5",
        "--cb-success-threshold": "2",
        "--cb-timeout-duration-secs": "30",
        "--cb-window-duration-secs": "60",
    }
    # The router drains its own in-flight requests for the longest request, and its pod waits.
    longest = _drain_seconds({}) - 10 - 20
    assert int(pairs["--shutdown-grace-period-secs"]) >= longest
    spec = _router(rendered_scenarios["ci-router"])["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == int(pairs["--shutdown-grace-period-secs"]) + 15
    values = chart_tool.deep_merge(ROUTER, {"router": {"healthCheck": {"intervalSecs": 2}}})
    assert (
        _pairs(_router_args(chart_tool.render_docs(values)))["--health-check-interval-secs"] == "2"
    )


def test_should_route_round_robin_when_engines_disable_radix_cache() -> None:
    assert _pairs(_router_args(chart_tool.render_docs(ROUTER)))["--policy"] == "round_robin"
    notes = "qwen-npu/templates/NOTES.txt"
    assert "WARNING: router.policy" not in chart_tool.render(ROUTER)[notes]
    cached = chart_tool.deep_merge(ROUTER, {"router": {"policy": "cache_aware"}})
    assert _pairs(_router_args(chart_tool.render_docs(cached)))["--policy"] == "cache_aware"
    assert "WARNING: router.policy is cache_aware" in chart_tool.render(cached)[notes]
    radix = chart_tool.deep_merge(cached, {"engine": {"disableRadixCache": False}})
    assert "WARNING: router.policy" not in chart_tool.render(radix)[notes]


def test_should_scrape_router_metrics_and_bound_disruptions_when_router_enabled(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered_scenarios["ci-router"]
    assert _pairs(_router_args(docs))["--prometheus-port"] == "29000"
    (service,) = chart_tool.find(docs, "Service", "qwen-npu-router")
    (monitor,) = chart_tool.find(docs, "ServiceMonitor", "qwen-npu-router")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert ports["metrics"]["port"] == 29000
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    # The engine's ServiceMonitor does not pick up the router's Service (and vice versa).
    (engine_monitor,) = chart_tool.find(docs, "ServiceMonitor", "qwen-npu-engine")
    labels = engine_monitor["spec"]["selector"]["matchLabels"]
    assert not labels.items() <= service["metadata"]["labels"].items()
    (pdb,) = chart_tool.find(docs, "PodDisruptionBudget", "qwen-npu-router")
    router = _router(docs)
    assert pdb["spec"]["selector"] == router["spec"]["selector"]
    (policy,) = chart_tool.find(docs, "NetworkPolicy", "qwen-npu-router")
    allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert allowed == {30000, 29000}
    minimal = chart_tool.deep_merge(
        ROUTER,
        {
            "monitoring": {"serviceMonitor": {"enabled": False}},
            "router": {"podDisruptionBudget": {"enabled": False}},
        },
    )
    plain = chart_tool.render_docs(minimal)
    assert not chart_tool.find(plain, "ServiceMonitor", "qwen-npu-router")
    assert not chart_tool.find(plain, "PodDisruptionBudget", "qwen-npu-router")


def test_should_hand_router_the_api_key_from_the_secret_when_set() -> None:
    values = chart_tool.values_from(
        chart_tool.CI_DIR / "router-values.yaml", chart_tool.CI_DIR / "apikey-values.yaml"
    )
    docs = chart_tool.render_docs(values)
    container = _router(docs)["spec"]["template"]["spec"]["containers"][0]
    assert _pairs(_router_args(docs))["--api-key"] == "$(QWEN_NPU_ENGINE_API_KEY)"
    env = {e["name"]: e for e in container["env"]}
    assert env["QWEN_NPU_ENGINE_API_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "qwen-npu-api-key", "key": "api-key"}
    }
    assert "--api-key" not in _router_args(chart_tool.render_docs(ROUTER))
    container = _router(chart_tool.render_docs(ROUTER))["spec"]["template"]["spec"]["containers"][0]
    assert "QWEN_NPU_ENGINE_API_KEY" not in {e["name"] for e in container["env"]}


def test_should_fail_when_router_grace_is_shorter_than_longest_request() -> None:
    values = chart_tool.deep_merge(ROUTER, {"router": {"shutdownGracePeriodSecs": 60}})
    with pytest.raises(helm.HelmRenderError, match=r"router.shutdownGracePeriodSecs \(60\)"):
        chart_tool.render(values)


@pytest.mark.system
def test_should_only_use_flags_the_pinned_router_knows_when_rendering_router(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    """Every flag (and choice) of the rendered router command is one `smg launch --help` lists."""
    assert ROUTER_BIN.exists(), f"{ROUTER_BIN} missing: run make router-venv (make test does)"
    proc = subprocess.run(
        [str(ROUTER_BIN), "launch", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    policies = re.search(r"--policy \{([a-z_,]+)\}", proc.stdout)
    assert policies is not None
    for name in ("ci-router", "397b-router"):
        args = _router_args(rendered_scenarios[name])
        assert unknown_flags(args, proc.stdout) == []
        assert _pairs(args)["--policy"] in policies[1].split(",")
