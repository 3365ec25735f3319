"""Where the A3 engine pods may run (issue 41, item 1): MindCluster labels an Atlas 800 A3 / A200T
A3 Box8 server `accelerator-type: module-a3-16` and an Atlas 900 A3 SuperPoD node
`module-a3-16-super-pod`; the A3 overlay and the 397B A3 profile must schedule on both, SuperPoD
placement (scheduling.superPod.spBlock) on SuperPoD nodes only. Judged the way the scheduler
judges a node: the rendered nodeSelector and required node affinity against the node's labels."""

from __future__ import annotations

from typing import Any

import pytest

from tools import chart as chart_tool

A3_KINDS = ("module-a3-16", "module-a3-16-super-pod")


def _expression_holds(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not judged here")


def admits(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a node with these labels passes the pod's nodeSelector and required node affinity
    (terms ORed, a term's expressions ANDed: Kubernetes' rule)."""
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (
        (spec.get("affinity") or {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if not required:
        return True
    return any(
        all(_expression_holds(e, labels) for e in term.get("matchExpressions", []))
        for term in required["nodeSelectorTerms"]
    )


def node(kind: str) -> dict[str, str]:
    return {"accelerator": "huawei-Ascend910", "accelerator-type": kind}


def _specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    workload = chart_tool.engine_workload(docs)
    return [(role, t["spec"]) for role, t in chart_tool.pod_templates(workload)]


def test_the_matcher_can_refuse() -> None:
    spec = {
        "nodeSelector": {"accelerator": "huawei-Ascend910"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "k", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
    }
    assert admits(spec, {"accelerator": "huawei-Ascend910", "k": "a"})
    assert not admits(spec, {"accelerator": "huawei-Ascend910", "k": "b"})
    assert not admits(spec, {"k": "a"})


@pytest.mark.parametrize("scenario", ["122b-a3", "qwen3.5-397b-a17b-w8a8-a3-mtp-on"])
def test_should_schedule_on_both_a3_server_kinds_when_a3_overlay_or_profile(
    rendered_scenarios: dict[str, list[dict[str, Any]]], scenario: str
) -> None:
    for role, spec in _specs(rendered_scenarios[scenario]):
        for kind in A3_KINDS:
            assert admits(spec, node(kind)), (scenario, role, kind)
        # ... and on nothing else
        assert not admits(spec, node("module-910b-8")), (scenario, role)
        assert not admits(spec, node("module-910b-16")), (scenario, role)
        assert not admits(spec, {"accelerator-type": "module-a3-16"}), (scenario, role)


def test_should_keep_superpod_placement_on_superpod_nodes_when_sp_block_set(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered_scenarios["397b-a3-superpod"]
    for role, spec in _specs(docs):
        assert admits(spec, node("module-a3-16-super-pod")), role
        assert not admits(spec, node("module-a3-16")), role
    overlay = chart_tool.values_from(
        chart_tool.PROFILES_DIR / "qwen3.5-122b-a10b-w8a8.yaml",
        chart_tool.CHIPS_DIR / "a3.yaml",
        extra={"scheduling": {"superPod": {"spBlock": 2}}},
    )
    for role, spec in _specs(chart_tool.render_docs(overlay)):
        assert admits(spec, node("module-a3-16-super-pod")), role
        assert not admits(spec, node("module-a3-16")), role


def test_should_leave_910b_placement_alone_when_no_a3_and_no_sp_block(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    for role, spec in _specs(rendered_scenarios["qwen3.5-397b-a17b-w8a8-mtp-on"]):
        assert admits(spec, node("module-910b-8")), role
        assert not admits(spec, node("module-a3-16")), role
    for role, spec in _specs(rendered_scenarios["ci-default"]):
        assert "affinity" not in spec, role  # no rule unless asked
