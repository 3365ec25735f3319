"""Fixtures of the chart tests: rendered scenarios, computed once per session."""

from __future__ import annotations

from typing import Any

import pytest

from tools import chart as chart_tool


@pytest.fixture(scope="session")
def scenario_values() -> dict[str, dict[str, Any]]:
    return chart_tool.scenarios()


@pytest.fixture(scope="session")
def rendered_scenarios(
    scenario_values: dict[str, dict[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """Scenario name -> the Kubernetes objects it renders."""
    return {name: chart_tool.render_docs(values) for name, values in scenario_values.items()}


def render_error(values: dict[str, Any]) -> str:
    """The message of a render that must fail (a bad value, a schema violation)."""
    import helm_python as helm

    from tools import chart as chart_tool

    with pytest.raises((helm.HelmRenderError, helm.HelmValuesError)) as caught:
        chart_tool.render(values)
    return str(caught.value)
