"""qwen_npu/serve/router.py: the router's command line, built once for the chart and the harness."""

from __future__ import annotations

from qwen_npu.serve.router import (
    CircuitBreaker,
    HealthCheck,
    Retry,
    RouterOptions,
    router_args,
    unknown_flags,
)


def flag(args: list[str], name: str) -> list[str]:
    """The values after ``name`` up to the next flag."""
    i = args.index(name) + 1
    out = []
    while i < len(args) and not args[i].startswith("--"):
        out.append(args[i])
        i += 1
    return out


def test_fixed_workers_and_every_tuning_flag() -> None:
    args = router_args(
        RouterOptions(
            host="127.0.0.1",
            port=8000,
            policy="round_robin",
            worker_urls=["http://a:1", "http://b:2"],
            health=HealthCheck(interval_secs=2, failure_threshold=4, timeout_secs=1),
            retry=Retry(max_retries=2, backoff_multiplier=2.0, jitter_factor=0.1),
            circuit_breaker=CircuitBreaker(failure_threshold=7),
            prometheus_port=29001,
        )
    )
    assert args[:6] == ["--host", "127.0.0.1", "--port", "8000", "--policy", "round_robin"]
    assert flag(args, "--worker-urls") == ["http://a:1", "http://b:2"]
    assert "--service-discovery" not in args and "--api-key" not in args
    assert flag(args, "--health-check-interval-secs") == ["2"]
    assert flag(args, "--health-failure-threshold") == ["4"]
    assert flag(args, "--health-check-timeout-secs") == ["1"]
    assert flag(args, "--retry-max-retries") == ["2"]
    assert flag(args, "--retry-backoff-multiplier") == ["2"]
    assert flag(args, "--retry-jitter-factor") == ["0.1"]
    assert flag(args, "--cb-failure-threshold") == ["7"]
    assert flag(args, "--prometheus-port") == ["29001"]


def test_chart_values_map_to_service_discovery_flags() -> None:
    values = {
        "policy": "cache_aware",
        "healthCheck": {"intervalSecs": 5, "failureThreshold": 2, "endpoint": "/health"},
        "retry": {"maxRetries": 4},
        "circuitBreaker": {"timeoutDurationSecs": 15},
        "metricsPort": 29000,
        "shutdownGracePeriodSecs": 600,
        "extraArgs": ["--log-level", "warn"],
    }
    opts = RouterOptions.from_values(
        values,
        port=30000,
        selector={"app.kubernetes.io/instance": "r", "app.kubernetes.io/component": "engine"},
        namespace="llm",
        api_key="$(QWEN_NPU_API_KEY)",
    )
    args = router_args(opts)
    assert flag(args, "--selector") == [
        "app.kubernetes.io/component=engine",
        "app.kubernetes.io/instance=r",
    ]
    assert flag(args, "--service-discovery-namespace") == ["llm"]
    assert flag(args, "--service-discovery-port") == ["30000"]
    assert flag(args, "--health-check-interval-secs") == ["5"]
    assert flag(args, "--health-success-threshold") == ["2"]  # absent keys keep defaults
    assert flag(args, "--retry-max-retries") == ["4"]
    assert flag(args, "--cb-timeout-duration-secs") == ["15"]
    assert flag(args, "--shutdown-grace-period-secs") == ["600"]
    assert flag(args, "--api-key") == ["$(QWEN_NPU_API_KEY)"]
    assert args[-2:] == ["--log-level", "warn"]
    assert opts.health.eject_bound_s() == 10.0


def test_unknown_flags_are_named() -> None:
    help_text = "  --host HOST\n  --port PORT\n  --retry-max-retries N\n"
    assert unknown_flags(["--host", "x", "--port", "1"], help_text) == []
    assert unknown_flags(["--host", "x", "--retries", "3"], help_text) == ["--retries"]
