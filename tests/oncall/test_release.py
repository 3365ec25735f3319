"""qwen_npu/oncall/cli.py reads the engine's name and kind from helm renders of the chart:
the release name, nameOverride and fullnameOverride, a LeaderWorkerSet, the router beside it."""

from __future__ import annotations

from typing import Any

import pytest

from qwen_npu.oncall import cli as rel
from tools import chart as chart_tool

from .stand_ins import manifest

MULTINODE = chart_tool.values_from(chart_tool.CI_DIR / "multinode-values.yaml")
ROUTER = chart_tool.values_from(chart_tool.CI_DIR / "router-values.yaml")


@pytest.mark.parametrize(
    ("release", "values"),
    [
        ("qwen-npu", {}),
        ("prod", {}),
        ("qwen-npu-canary", {}),
        ("prod", {"nameOverride": "llm"}),
        ("prod", {"fullnameOverride": "serving"}),
        ("a-very-long-release-name-that-runs-past-the-dns-label-limit-of-63", {}),
        ("big", MULTINODE),
        ("big", {**MULTINODE, "fullnameOverride": "gang"}),
        ("front", ROUTER),
    ],
)
def test_the_engine_workload_is_the_one_helm_rendered(release: str, values: dict[str, Any]) -> None:
    docs = chart_tool.documents(chart_tool.render(values, name=release))
    want = chart_tool.engine_workload(docs)
    got = rel.engine_workload(manifest(release, values))
    assert got is not None
    assert (got.kind, got.name) == (want["kind"], want["metadata"]["name"])
    assert got.ref == f"{got.kind.lower()}/{want['metadata']['name']}"
    # The selectors the switches wait on match the serving pods whatever the names.
    template = (
        dict(chart_tool.pod_templates(want)).get("single")
        or dict(chart_tool.pod_templates(want))["leader"]
    )
    labels = template["metadata"]["labels"]
    for pair in rel.serving_selector(release).split(","):
        key, value = pair.split("=", 1)
        assert labels[key] == value


def test_no_engine_or_two_engines_is_none() -> None:
    assert (
        rel.engine_workload("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n") is None
    )
    one = manifest("qwen-npu")
    assert rel.engine_workload(one + one) is None
