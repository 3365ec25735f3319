"""Render the chart's PrometheusRule and write its spec as a plain Prometheus rule file.

What ``make lint-observability`` runs promtool on, and what a Prometheus without the Operator
loads (``rule_files:``): the rules exactly as the chart deploys them, thresholds and runbook URLs
filled from the values. Uses helm-python-sdk (the Helm Go SDK, offline, no cluster).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

TEMPLATE = "templates/prometheusrule.yaml"


class RenderError(ValueError):
    """The chart could not be rendered into a rule file."""


def render_rules(
    chart: Path,
    values: dict[str, Any] | None = None,
    *,
    release: str = "qwen-npu",
    namespace: str = "default",
) -> dict[str, Any]:
    """The ``spec`` (``groups:``) of the PrometheusRule the chart renders with ``values``."""
    try:
        # lazy: an extra's (pyproject.toml); the base install goes without
        from helm_python import Chart, HelmError
    except ImportError as exc:
        raise RenderError(
            f"helm-python-sdk is not installed ({exc}); run make setup or "
            "pip install 'qwen-npu[dev]'"
        ) from None
    try:
        rendered = Chart.load(str(chart)).render(values or {}, name=release, namespace=namespace)
    except HelmError as exc:
        raise RenderError(f"{chart}: helm render failed: {exc}") from None
    key = f"{chart.name}/{TEMPLATE}"
    docs = [d for d in yaml.safe_load_all(rendered.get(key, "")) if d]
    if not docs:
        raise RenderError(
            f"{chart}: {TEMPLATE} rendered nothing; set monitoring.prometheusRule.enabled=true"
        )
    spec: dict[str, Any] = docs[0]["spec"]
    return spec


def load_values(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RenderError(f"{path}: cannot read values ({exc}); pass a YAML mapping") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RenderError(f"{path}: values must be a YAML mapping at the top level")
    return data
