"""Fixtures for the dashboards/alerts tests: the chart rendered as it deploys, and promtool.

The rules under test are never the generator's raw output: they are the PrometheusRule that the
chart renders (helm-python-sdk, the real Helm Go SDK) with its default values, so the thresholds
and runbook URLs checked here are the ones a cluster gets.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.paths import REPO

CHART = REPO / "helm" / "qwen-npu"
RELEASE = "qwen-npu"
NAMESPACE = "qwen"  # the promtool tests expect this release namespace
RULE_TESTS = Path(__file__).resolve().parent / "rules"


def render_chart(values: dict[str, Any] | None = None) -> dict[str, str]:
    from helm_python import Chart

    chart = Chart.load(str(CHART))
    return chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)


def documents(rendered: dict[str, str], template: str) -> list[dict[str, Any]]:
    text = rendered.get(f"qwen-npu/templates/{template}", "")
    return [d for d in yaml.safe_load_all(text) if d]


def rule_spec(rendered: dict[str, str]) -> dict[str, Any]:
    (rule,) = documents(rendered, "prometheusrule.yaml")
    assert rule["kind"] == "PrometheusRule"
    spec: dict[str, Any] = rule["spec"]
    return spec


@pytest.fixture(scope="session")
def render() -> Callable[[dict[str, Any] | None], dict[str, str]]:
    return render_chart


@pytest.fixture(scope="session")
def rendered_default() -> dict[str, str]:
    return render_chart()


@pytest.fixture(scope="session")
def rules_file(tmp_path_factory: pytest.TempPathFactory, rendered_default: dict[str, str]) -> Path:
    """The chart's PrometheusRule spec (default values) as a plain Prometheus rule file."""
    path = tmp_path_factory.mktemp("rules") / "qwen-npu-alerts.yaml"
    path.write_text(yaml.safe_dump(rule_spec(rendered_default), sort_keys=False))
    return path


def _prometheus_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run `make tools-prometheus` (Debian's prometheus)")
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    return _prometheus_tool("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return _prometheus_tool("prometheus")
