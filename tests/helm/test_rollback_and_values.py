"""Rollback safety between revisions, render-time errors for bad values, the values schema."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tools import chart as chart_tool
from tools.paths import CHART_DIR

P = chart_tool.PROFILES_DIR
UPSTREAM = chart_tool.values_from(P / "qwen3.6-35b-a3b-w8a8.yaml")
BIG = chart_tool.values_from(P / "qwen3.5-397b-a17b-w8a8.yaml")

# Fields Kubernetes refuses to change on update (a rollback is an update): per kind, JSON paths.
IMMUTABLE: dict[str, list[tuple[str, ...]]] = {
    "Deployment": [("spec", "selector")],
    "Service": [("spec", "clusterIP"), ("spec", "clusterIPs"), ("spec", "ipFamilies")],
    "PodDisruptionBudget": [("spec", "selector")],
    "NetworkPolicy": [("spec", "podSelector")],
    "LeaderWorkerSet": [("spec", "leaderWorkerTemplate", "size")],
    "RoleBinding": [("roleRef",)],
    "ServiceMonitor": [("spec", "selector")],
}

NEW_TAG = {"image": {"engine": {"tag": "0.1.1"}}}
PATCH_OFF = {"patches": {"disabled": ["mtp-modelslim-unquant"]}}
PAIRS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "image-tag": (UPSTREAM, chart_tool.deep_merge(UPSTREAM, NEW_TAG)),
    "mtp-off": (UPSTREAM, chart_tool.deep_merge(UPSTREAM, {"mtp": {"enabled": False}})),
    "patch-off": (UPSTREAM, chart_tool.deep_merge(UPSTREAM, PATCH_OFF)),
    "profile-27b": (UPSTREAM, chart_tool.values_from(P / "qwen3.5-27b-w8a8.yaml")),
    "profile-122b": (UPSTREAM, chart_tool.values_from(P / "qwen3.5-122b-a10b-w8a8.yaml")),
    "lws-image-tag": (BIG, chart_tool.deep_merge(BIG, NEW_TAG)),
    "lws-mtp-off": (BIG, chart_tool.deep_merge(BIG, {"mtp": {"enabled": False}})),
    "router-on": (UPSTREAM, chart_tool.values_from(chart_tool.CI_DIR / "router-values.yaml")),
}  # fmt: skip


def _get(doc: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = doc
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _index(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


@pytest.mark.parametrize("pair", list(PAIRS))
def test_should_keep_selectors_and_immutable_fields_when_rolling_back(pair: str) -> None:
    before_values, after_values = PAIRS[pair]
    before = _index(chart_tool.render_docs(before_values))
    after = _index(chart_tool.render_docs(after_values))
    common = before.keys() & after.keys()
    assert ("Service", "qwen-npu-engine") in common
    for key in common:
        for path in IMMUTABLE.get(key[0], []):
            assert _get(before[key], path) == _get(after[key], path), (key, path)
    # The engine workload keeps its kind and name, so the rollback updates it in place.
    engines = {k for k in before if k[1] == "qwen-npu-engine" and k[0] != "Service"}
    assert engines == {k for k in after if k[1] == "qwen-npu-engine" and k[0] != "Service"}
    # Nothing whose spec a rollback cannot shrink or rebind: no PVC, no StatefulSet.
    kinds = {k[0] for k in before.keys() | after.keys()}
    assert not kinds & {"PersistentVolumeClaim", "StatefulSet", "Job"}
    # The pair really differs (the test would be empty otherwise).
    assert before != after


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    """The paths at which two parsed documents differ (lists compared item by item)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d
            for k in sorted(a.keys() | b.keys())
            for d in _differences(a.get(k), b.get(k), f"{path}.{k}")
        ]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [path]  # fmt: skip


def _container_names(template: dict[str, Any], path: str) -> str:
    """`.spec.containers[0].image` -> `engine.image` (the name says which container it is)."""
    kind, index, field = re.fullmatch(r"\.spec\.(\w+)\[(\d+)\]\.(.*)", path).groups()  # type: ignore[union-attr]
    return f"{template['spec'][kind][int(index)]['name']}.{field}"


def test_should_roll_engine_pods_only_through_their_images_when_image_tag_changes() -> None:
    """A new engine tag reaches the pods as the images that run it, and nothing else changes."""
    for pair in ("image-tag", "lws-image-tag"):
        before_values, after_values = PAIRS[pair]
        before = chart_tool.engine_workload(chart_tool.render_docs(before_values))
        after = chart_tool.engine_workload(chart_tool.render_docs(after_values))
        for (role, old), (_, new) in zip(
            chart_tool.pod_templates(before), chart_tool.pod_templates(after), strict=True
        ):
            changed = [_container_names(new, p) for p in _differences(old, new)]
            # The engine and its preflight run the engine image; the sidecar has its own.
            assert sorted(changed) == ["engine.image", "preflight.image"], (pair, role, changed)
            assert chart_tool.container(new, "engine")["image"].endswith(":0.1.1")  # type: ignore[index]


def _chart_released_as(tmp: Path, version: str, app_version: str) -> helm.Chart:
    """The chart as a later release would ship it: the same templates and values, new versions."""
    copy = tmp / f"qwen-npu-{version}"
    shutil.copytree(CHART_DIR, copy)
    meta = yaml.safe_load((copy / "Chart.yaml").read_text())
    meta.update(version=version, appVersion=app_version)
    (copy / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return helm.Chart.load(copy)


@pytest.mark.parametrize("scenario", ["deployment", "lws-router"])
def test_should_keep_pod_templates_when_only_the_chart_version_changes(
    scenario: str, tmp_path: Path
) -> None:
    """Issue 24.6: a chart release that only touches, say, a dashboard must not roll the engines
    (each restart reloads the model). Pod templates carry no chart or app version; the workloads'
    own metadata still does, so `kubectl get -L helm.sh/chart` keeps working."""
    values = UPSTREAM if scenario == "deployment" else chart_tool.values_from(
        P / "qwen3.5-397b-a17b-w8a8.yaml", chart_tool.CI_DIR / "router-values.yaml"
    )  # fmt: skip
    current = chart_tool.chart().metadata
    later = _chart_released_as(tmp_path, "0.9.0", "0.9.0")
    assert (current["version"], current["appVersion"]) != ("0.9.0", "0.9.0")
    # the same images, their tags pinned as `make release` pins them (an empty tag is appVersion's)
    same = {name: {"tag": current["appVersion"]} for name in ("engine", "sidecar")}
    values = chart_tool.deep_merge(values, {"image": same})
    opts = {"name": chart_tool.RELEASE, "namespace": chart_tool.NAMESPACE}
    before = _index(chart_tool.render_docs(values))
    after = _index(chart_tool.documents(later.render(values, **opts)))
    workloads = [k for k in before if k[0] in ("Deployment", "LeaderWorkerSet")]
    assert {k[0] for k in workloads} == (
        {"Deployment"} if scenario == "deployment" else {"Deployment", "LeaderWorkerSet"}
    )
    for key in workloads:
        templates = list(chart_tool.pod_templates(before[key]))
        assert templates == list(chart_tool.pod_templates(after[key])), key
        for _, template in templates:
            assert not {"helm.sh/chart", "app.kubernetes.io/version"} & set(
                template["metadata"]["labels"]
            ), key
        labels = after[key]["metadata"]["labels"]
        assert labels["helm.sh/chart"] == "qwen-npu-0.9.0", key
        assert labels["app.kubernetes.io/version"] == "0.9.0", key


BOTH_ZERO = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}
BAD_VALUES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "tp-not-dividing-heads": (
        {"engine": {"tpSize": 3}},
        ["engine.tpSize (3)", "model.linearNumValueHeads (32)"],
    ),
    "tp-not-dividing-key-heads": (
        {"engine": {"tpSize": 8}, "model": {"linearNumValueHeads": 64, "linearNumKeyHeads": 4}},
        ["engine.tpSize (8)", "model.linearNumKeyHeads (4)"],
    ),
    "tp-not-multiple-of-nodes": (
        {"engine": {"tpSize": 4, "nodes": 3}},
        ["engine.tpSize (4)", "engine.nodes (3)"],
    ),
    "both-zero-rollout": (
        {"updateStrategy": BOTH_ZERO},
        ["updateStrategy.rollingUpdate.maxSurge", "updateStrategy.rollingUpdate.maxUnavailable"],
    ),
    "missing-pvc": ({"model": {"pvc": {"claimName": ""}}}, ["model.pvc.claimName"]),
    "missing-host-path": ({"model": {"source": "hostPath"}}, ["model.hostPath.path"]),
    "missing-image": ({"model": {"source": "image"}}, ["model.image.reference"]),
    "missing-model-path": ({"model": {"path": ""}}, ["model.path"]),
    "min-above-max": (
        {"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}},
        ["autoscaling.minReplicas", "autoscaling.maxReplicas"],
    ),
    "wrong-type": ({"engine": {"tpSize": "two"}}, ["/engine/tpSize", "want integer"]),
    "wrong-bool": ({"mtp": {"enabled": "yes"}}, ["/mtp/enabled", "want boolean"]),
    "misspelled-key": ({"mtp": {"enable": False}}, ["/mtp", "'enable' not allowed"]),
    "unknown-source": ({"model": {"source": "s3"}}, ["/model/source"]),
    "unknown-patch": ({"patches": {"disabled": ["no-such-patch"]}}, ["/patches/disabled/0"]),
    "plain-api-key": ({"apiKey": {"value": "sk-123"}}, ["/apiKey", "'value' not allowed"]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_should_fail_naming_the_value_when_values_are_bad(case: str) -> None:
    values, fragments = BAD_VALUES[case]
    with pytest.raises((helm.HelmRenderError, helm.HelmValuesError)) as caught:
        chart_tool.render(values)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message


def test_should_match_values_file_when_regenerating_schema(repo: Any) -> None:
    import importlib.util

    path = repo / "helm/qwen-npu/hack/gen_schema.py"
    spec = importlib.util.spec_from_file_location("gen_schema", path)
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    values_text = (repo / "helm/qwen-npu/values.yaml").read_text()
    committed = (repo / "helm/qwen-npu/values.schema.json").read_text()
    assert gen.render_schema(values_text) == committed
    readme = (repo / "helm/qwen-npu/README.md").read_text()
    assert gen.render_readme(readme, values_text) == readme
    # Every value in values.yaml has a schema entry with a description, and nothing else does.
    schema = json.loads(committed)
    values = yaml.safe_load(values_text)

    def walk(node: dict[str, Any], value: Any, path: str) -> None:
        if node.get("type") == "object" and "properties" in node:
            assert node["additionalProperties"] is False, path
            assert set(node["properties"]) == set(value), path
            for key, child in node["properties"].items():
                walk(child, value[key], f"{path}.{key}")
        else:
            assert node.get("description"), path
            assert node["default"] == value, path

    walk(schema, values, "")
    # A missing description is an error naming the key.
    broken = values_text.replace("  # -- Served model name", "  # Served model name")
    with pytest.raises(gen.SchemaSourceError, match=r"key model\.name"):
        gen.render_schema(broken)


def test_should_ship_filled_monitoring_when_installing_with_defaults() -> None:
    """A default install ships the ServiceMonitor, the alert rules and one ConfigMap per dashboard,
    with every threshold placeholder filled and the labels and runbook links the values give."""
    docs = chart_tool.render_docs({})
    monitoring = chart_tool.merged_values({})["monitoring"]
    (rule,) = chart_tool.find(docs, "PrometheusRule")
    assert chart_tool.find(docs, "ServiceMonitor")
    boards = [d for d in chart_tool.find(docs, "ConfigMap") if "grafana_dashboard" in json.dumps(d)]
    shipped = {p.name for p in (CHART_DIR / "files/dashboards").glob("*.json")}
    assert {name for board in boards for name in board["data"]} == shipped
    for board in boards:
        assert monitoring["dashboards"]["labels"].items() <= board["metadata"]["labels"].items()
        for text in board["data"].values():
            assert "${thresholds." not in text
            json.loads(text)
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert alerts and "${thresholds." not in json.dumps(rule)
    for alert in alerts:
        assert alert["annotations"]["runbook_url"].startswith(monitoring["runbookBaseUrl"])


def test_should_list_every_bad_value_once_when_several_are_wrong() -> None:
    """Issue 13.8: one render names every problem, one line each, not only the first."""
    values = {
        "engine": {"tpSize": 3, "terminationGracePeriodSeconds": 60},
        "model": {"pvc": {"claimName": ""}},
        "autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2},
        "preflight": {"extraArgs": ["--tp", "4"]},
    }
    with pytest.raises(helm.HelmRenderError) as caught:
        chart_tool.render(values)
    message = str(caught.value)
    header, *lines = message.splitlines()
    assert header.endswith(
        "5 bad value(s) in the qwen-npu values (every one listed, fix them all):"
    )
    expected = [
        "engine.tpSize (3) does not divide model.linearNumValueHeads (32)",
        "model.pvc.claimName is empty",
        "autoscaling.minReplicas (5) is above autoscaling.maxReplicas (2)",
        "preflight.extraArgs: --tp is a flag the chart renders from engine.tpSize",
        "engine.terminationGracePeriodSeconds (60) is shorter than the drain",
    ]
    assert len(lines) == len(expected)
    for fragment in expected:
        assert sum(fragment in line for line in lines) == 1, fragment


def test_should_check_values_once_in_validate_yaml_when_rendering() -> None:
    """The checks run once, from templates/validate.yaml (not from a helper every object includes):
    the failure points there and lists the problems once; good values render it to nothing."""
    with pytest.raises(helm.HelmRenderError) as caught:
        chart_tool.render({"engine": {"tpSize": 3}, "model": {"pvc": {"claimName": ""}}})
    message = str(caught.value)
    assert "(qwen-npu/templates/validate.yaml:" in message
    assert message.count("bad value(s)") == 1 and message.count("model.pvc.claimName") == 1
    rendered = chart_tool.render({})
    assert rendered["qwen-npu/templates/validate.yaml"].strip() == ""
