"""Object names fit 63 characters, and the schema refuses what Kubernetes would (issue 40 item 11).

Through Helm's own render (tools/chart, Helm's Go SDK): a release name of 53 characters (Helm's
limit) renders every object's metadata.name within 63, in every optional part; each value
Kubernetes would refuse at install time is refused by the chart's schema first, naming the key.
The schema is generated (helm/qwen-npu/hack/gen_schema.py); the good values beside each bad one
show the rule is not simply "refuse the key".
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helm.conftest import render_error
from tools import chart as chart_tool

LONGEST_RELEASE = "r" * 53  # Helm refuses longer release names


def _names(values: dict[str, Any], release: str) -> list[tuple[str, str]]:
    docs = chart_tool.documents(chart_tool.render(values, name=release))
    return [(doc["kind"], doc["metadata"]["name"]) for doc in docs]


@pytest.mark.parametrize(
    "scenario",
    ["qwen3.6-35b-a3b-w8a8-mtp-on", "ci-minimal", "397b-router", "397b-hpa", "397b-multinode",
     "397b-fault-rescheduling", "397b-a3-superpod"],
)  # fmt: skip
def test_a_53_character_release_renders_every_name_within_63(
    scenario_values: dict[str, dict[str, Any]], scenario: str
) -> None:
    names = _names(scenario_values[scenario], LONGEST_RELEASE)
    assert len(names) >= 3
    too_long = [(kind, name, len(name)) for kind, name in names if len(name) > 63]
    assert too_long == []
    # the engine's objects keep their suffix: the base was truncated, not the whole name
    assert any(name.endswith("-engine") for _, name in names)


def test_a_fullname_override_of_63_characters_still_fits() -> None:
    names = _names({"fullnameOverride": "f" * 63}, "x")
    assert max(len(name) for _, name in names) <= 63
    assert not [name for _, name in names if name.endswith("-")]


@pytest.mark.parametrize(
    ("bad", "key"),
    [
        ({"podDisruptionBudget": {"maxUnavailable": "lots"}},
         "/podDisruptionBudget/maxUnavailable"),
        ({"router": {"podDisruptionBudget": {"maxUnavailable": -1}}},
         "/router/podDisruptionBudget/maxUnavailable"),
        ({"image": {"engine": {"tag": "bad tag"}}}, "/image/engine/tag"),
        ({"image": {"sidecar": {"tag": "-x"}}}, "/image/sidecar/tag"),
        ({"fullnameOverride": "Bad_Name"}, "/fullnameOverride"),
        ({"nameOverride": "n" * 64}, "/nameOverride"),
        ({"engine": {"resources": {"limits": {"memory": "lots"}}}},
         "/engine/resources/limits/memory"),
        ({"sidecar": {"resources": {"requests": {"cpu": "1 core"}}}},
         "/sidecar/resources/requests/cpu"),
        ({"engine": {"resources": {"limit": {"memory": "1Gi"}}}}, "/engine/resources"),
        ({"engine": None}, "missing property 'engine'"),
    ],
)  # fmt: skip
def test_the_schema_refuses_what_kubernetes_refuses_naming_the_key(
    bad: dict[str, Any], key: str
) -> None:
    message = render_error(bad)
    assert "values don't meet the specifications of the schema" in message
    assert key in message, message


def test_the_schema_accepts_what_kubernetes_accepts() -> None:
    good = {
        "podDisruptionBudget": {"maxUnavailable": "50%"},
        "router": {"podDisruptionBudget": {"maxUnavailable": 0}},
        "image": {"engine": {"tag": "0.1.0-rc.1_b2"}},
        "fullnameOverride": "my-qwen",
        "engine": {"resources": {"requests": {"cpu": 16, "memory": "128Gi"},
                                 "limits": {"memory": "256Gi", "cpu": "15500m"}}},
        "sidecar": {"resources": {"requests": {"cpu": "0.5", "memory": "1e9"}}},
    }  # fmt: skip
    names = _names(good, "qwen")
    assert ("Deployment", "my-qwen-engine") in names
