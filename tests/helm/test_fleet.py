"""Ascend fleet features of the chart: MindCluster fault rescheduling, Huawei Cloud CCE names,
A3 SuperPoD placement (issue 27). Each is rendered, validated strictly, and its bad values fail in
one line naming the value."""

from __future__ import annotations

from typing import Any

import pytest

from tools import chart

from .conftest import render_error

FAULT_LABELS = (
    "fault-scheduling",
    "fault-retry-times",
    "pod-rescheduling",
    "ring-controller.atlas",
)


def _templates(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    docs = chart.render_docs(values)
    for doc in docs:
        assert chart.validate(doc, chart.KUBE_VERSIONS[-1]) == [], doc["kind"]
    return dict(chart.pod_templates(chart.engine_workload(docs)))


def _engine_limits(template: dict[str, Any]) -> dict[str, Any]:
    engine = chart.container(template, "engine")
    assert engine is not None
    limits: dict[str, Any] = engine["resources"]["limits"]
    return limits


def test_fault_rescheduling_labels_every_pod_of_a_group() -> None:
    values = chart.scenarios()["397b-fault-rescheduling"]
    templates = _templates(values)
    assert set(templates) == {"leader", "worker"}
    for template in templates.values():
        labels = template["metadata"]["labels"]
        assert {k: labels[k] for k in FAULT_LABELS} == {
            "fault-scheduling": "grace",
            "fault-retry-times": "3",
            "pod-rescheduling": "on",
            "ring-controller.atlas": "ascend-910b",
        }
        assert template["spec"]["schedulerName"] == "volcano"
    (lws,) = chart.find(chart.render_docs(values), "LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"


def test_fault_rescheduling_is_off_by_default() -> None:
    for template in _templates({}).values():
        assert not set(FAULT_LABELS) & set(template["metadata"]["labels"])


def test_cce_overlay_uses_cce_resource_and_node_label() -> None:
    (template,) = _templates(chart.scenarios()["122b-cce"]).values()
    assert template["spec"]["nodeSelector"] == {"accelerator/huawei-npu": "ascend-1980"}
    limits = _engine_limits(template)
    assert "huawei.com/ascend-1980" in limits and "huawei.com/Ascend910" not in limits


def test_superpod_block_annotation() -> None:
    (template,) = _templates(chart.scenarios()["397b-a3-superpod"]).values()
    assert template["metadata"]["annotations"]["sp-block"] == "16"
    assert "sp-block" not in next(iter(_templates({}).values()))["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"scheduling": {"faultRescheduling": {"enabled": True}}}, "scheduling.faultRescheduling"),
        ({"scheduling": {"superPod": {"spBlock": 3}}}, "scheduling.superPod.spBlock (3)"),
    ],
)
def test_bad_fleet_values_fail_in_one_line(values: dict[str, Any], names: str) -> None:
    assert names in render_error(values)


def _router(values: dict[str, Any]) -> dict[str, Any]:
    docs = chart.render_docs({"router": {"enabled": True}, **values})
    (router,) = [
        d for d in chart.find(docs, "Deployment") if d["metadata"]["name"].endswith("-router")
    ]
    spec: dict[str, Any] = router["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize(
    ("values", "mounted"),
    [
        ({}, True),  # pvc: the router reads each engine's tokenizer from the model volume
        ({"model": {"source": "hostPath", "hostPath": {"path": "/data/models"}}}, False),
        ({"model": {"source": "hostPath", "hostPath": {"path": "/data/models"}},
          "router": {"enabled": True, "mountModel": "true"}}, True),
    ],
)  # fmt: skip
def test_the_router_reads_tokenizers_from_the_model_volume(
    values: dict[str, Any], mounted: bool
) -> None:
    spec = _router(values)
    (container,) = spec["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert ("/models" in mounts) is mounted
    if mounted:
        assert mounts["/models"]["readOnly"] is True
        assert any(v["name"] == "model" for v in spec["volumes"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HF_HUB_OFFLINE"] == "1"


def test_the_engine_sees_its_pod_annotations_for_ascend_real() -> None:
    for template in _templates({}).values():
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        (item,) = volumes["podinfo"]["downwardAPI"]["items"]
        assert item == {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
        engine = chart.container(template, "engine")
        assert engine is not None
        mounts = {m["name"]: m["mountPath"] for m in engine["volumeMounts"]}
        assert mounts["podinfo"] == "/etc/qwen-npu/podinfo"  # the entrypoint's default file
