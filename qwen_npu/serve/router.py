"""The router's command line, built in one place: ``router_args(RouterOptions(...))``.

Why this exists: the SGLang router (package ``sglang-router``, command ``smg launch`` or
``python -m sglang_router.launch_router``) runs in two places, the chart's router Deployment and
the failover proof (``make failover``, tools/perf/failover.py). Both must pass the same flags with
the same meaning, so the flags are spelled once, here; a test renders the chart and compares its
router arguments with ``router_args`` of the same values (``RouterOptions.from_values``).

Flags are those of the pinned router (SGLANG_ROUTER_VERSION in docker/versions.env); ``smg launch
--help`` is the reference. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The command of the pinned router's launcher (the package also installs ``smg``).
LAUNCH_MODULE = ("python3", "-m", "sglang_router.launch_router")


@dataclass(frozen=True)
class HealthCheck:
    """How the router probes each worker; a worker is out after ``failure_threshold`` misses."""

    interval_secs: int = 10
    failure_threshold: int = 3
    success_threshold: int = 2
    timeout_secs: int = 5
    endpoint: str = "/health"

    def eject_bound_s(self) -> float:
        """Longest time from a dead worker to the router leaving it out (interval x misses)."""
        return float(self.interval_secs * self.failure_threshold)


@dataclass(frozen=True)
class Retry:
    """The router's retries of a failed request on another worker."""

    max_retries: int = 3
    initial_backoff_ms: int = 50
    max_backoff_ms: int = 2000
    backoff_multiplier: float = 1.5
    jitter_factor: float = 0.2


@dataclass(frozen=True)
class CircuitBreaker:
    """Per-worker circuit breaker: open after ``failure_threshold`` failures in the window."""

    failure_threshold: int = 5
    success_threshold: int = 2
    timeout_duration_secs: int = 30
    window_duration_secs: int = 60


@dataclass(frozen=True)
class RouterOptions:
    """Everything the router's command line says.

    Workers come either as ``worker_urls`` (fixed list, the failover proof) or from Kubernetes
    service discovery (``selector`` non-empty, the chart). ``api_key`` is passed as given: the
    chart gives ``$(ENV_NAME)`` so the kubelet expands it from the Secret.
    """

    host: str = "0.0.0.0"
    port: int = 30000
    policy: str = "cache_aware"
    worker_urls: Sequence[str] = ()
    selector: Mapping[str, str] = field(default_factory=dict)
    service_discovery_port: int = 30000
    service_discovery_namespace: str | None = None
    health: HealthCheck = HealthCheck()
    retry: Retry = Retry()
    circuit_breaker: CircuitBreaker = CircuitBreaker()
    prometheus_host: str = "0.0.0.0"
    prometheus_port: int = 29000
    request_timeout_secs: int = 1800
    shutdown_grace_period_secs: int = 180
    api_key: str | None = None
    log_level: str | None = None
    extra_args: Sequence[str] = ()

    @classmethod
    def from_values(
        cls,
        router: Mapping[str, Any],
        *,
        port: int,
        selector: Mapping[str, str] | None = None,
        namespace: str | None = None,
        api_key: str | None = None,
    ) -> RouterOptions:
        """Options from the chart's ``router`` values (camelCase keys; absent keys keep defaults).

        Keys read: policy, healthCheck.{intervalSecs, failureThreshold, successThreshold,
        timeoutSecs, endpoint}, retry.{maxRetries, initialBackoffMs, maxBackoffMs,
        backoffMultiplier, jitterFactor}, circuitBreaker.{failureThreshold, successThreshold,
        timeoutDurationSecs, windowDurationSecs}, metricsPort, requestTimeoutSecs,
        shutdownGracePeriodSecs, extraArgs.
        """

        def pick(section: str, names: dict[str, str], default: Any) -> Any:
            given = router.get(section) or {}
            kwargs = {attr: given[key] for key, attr in names.items() if key in given}
            return type(default)(**{**default.__dict__, **kwargs})

        base = cls()
        return cls(
            port=port,
            policy=str(router.get("policy", base.policy)),
            selector=dict(selector or {}),
            service_discovery_port=port,
            service_discovery_namespace=namespace,
            health=pick(
                "healthCheck",
                {
                    "intervalSecs": "interval_secs",
                    "failureThreshold": "failure_threshold",
                    "successThreshold": "success_threshold",
                    "timeoutSecs": "timeout_secs",
                    "endpoint": "endpoint",
                },
                base.health,
            ),
            retry=pick(
                "retry",
                {
                    "maxRetries": "max_retries",
                    "initialBackoffMs": "initial_backoff_ms",
                    "maxBackoffMs": "max_backoff_ms",
                    "backoffMultiplier": "backoff_multiplier",
                    "jitterFactor": "jitter_factor",
                },
                base.retry,
            ),
            circuit_breaker=pick(
                "circuitBreaker",
                {
                    "failureThreshold": "failure_threshold",
                    "successThreshold": "success_threshold",
                    "timeoutDurationSecs": "timeout_duration_secs",
                    "windowDurationSecs": "window_duration_secs",
                },
                base.circuit_breaker,
            ),
            prometheus_port=int(router.get("metricsPort", base.prometheus_port)),
            request_timeout_secs=int(router.get("requestTimeoutSecs", base.request_timeout_secs)),
            shutdown_grace_period_secs=int(
                router.get("shutdownGracePeriodSecs", base.shutdown_grace_period_secs)
            ),
            api_key=api_key,
            extra_args=tuple(str(a) for a in router.get("extraArgs") or ()),
        )


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def router_args(o: RouterOptions) -> list[str]:
    """The router's flags (after the command), in a fixed order."""
    args = ["--host", o.host, "--port", str(o.port), "--policy", o.policy]
    if o.worker_urls:
        args += ["--worker-urls", *o.worker_urls]
    if o.selector:
        args += ["--service-discovery", "--selector"]
        args += [f"{k}={v}" for k, v in sorted(o.selector.items())]
        args += ["--service-discovery-port", str(o.service_discovery_port)]
        if o.service_discovery_namespace:
            args += ["--service-discovery-namespace", o.service_discovery_namespace]
    h, r, cb = o.health, o.retry, o.circuit_breaker
    args += [
        "--health-check-endpoint", h.endpoint,
        "--health-check-interval-secs", str(h.interval_secs),
        "--health-check-timeout-secs", str(h.timeout_secs),
        "--health-failure-threshold", str(h.failure_threshold),
        "--health-success-threshold", str(h.success_threshold),
        "--retry-max-retries", str(r.max_retries),
        "--retry-initial-backoff-ms", str(r.initial_backoff_ms),
        "--retry-max-backoff-ms", str(r.max_backoff_ms),
        "--retry-backoff-multiplier", _num(r.backoff_multiplier),
        "--retry-jitter-factor", _num(r.jitter_factor),
        "--cb-failure-threshold", str(cb.failure_threshold),
        "--cb-success-threshold", str(cb.success_threshold),
        "--cb-timeout-duration-secs", str(cb.timeout_duration_secs),
        "--cb-window-duration-secs", str(cb.window_duration_secs),
        "--prometheus-host", o.prometheus_host,
        "--prometheus-port", str(o.prometheus_port),
        "--request-timeout-secs", str(o.request_timeout_secs),
        "--shutdown-grace-period-secs", str(o.shutdown_grace_period_secs),
    ]  # fmt: skip
    if o.api_key:
        args += ["--api-key", o.api_key]
    if o.log_level:
        args += ["--log-level", o.log_level]
    return args + list(o.extra_args)


def unknown_flags(args: Sequence[str], help_text: str) -> list[str]:
    """The ``--flags`` of ``args`` that ``smg launch --help`` (``help_text``) does not list.

    A router flag the pinned router rejects would only show when the router starts; checking
    the flags against its help first turns that into one line before any traffic moves.
    """
    known = set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", help_text))
    return [a for a in args if a.startswith("--") and a.split("=", 1)[0] not in known]


__all__ = [
    "LAUNCH_MODULE",
    "CircuitBreaker",
    "HealthCheck",
    "Retry",
    "RouterOptions",
    "router_args",
    "unknown_flags",
]
