"""`make patch-off PATCH=<name>` as a values change: both containers' env, a pod roll, same
selectors.

The on-call target runs `helm upgrade --reuse-values --set-json patches.disabled=[...]`; the runbook
and people type `--set patches.disabled={name}`. Both are parsed here by Helm's own code
(helm-python-sdk), merged over the release's values as --reuse-values does, and rendered.
"""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
import yaml

from qwen_npu.patches.registry import PATCHES
from tools import chart as chart_tool

PROFILES = {
    "deployment": chart_tool.values_from(chart_tool.PROFILES_DIR / "qwen3.6-35b-a3b-w8a8.yaml"),
    "lws": chart_tool.values_from(chart_tool.PROFILES_DIR / "qwen3.5-397b-a17b-w8a8.yaml"),
}
NAMES = [p.name for p in PATCHES]

# Selector fields per kind (all immutable or identity-bearing).
SELECTORS: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec", "selector"),
    "Service": ("spec", "selector"),
    "PodDisruptionBudget": ("spec", "selector"),
    "NetworkPolicy": ("spec", "podSelector"),
    "ServiceMonitor": ("spec", "selector"),
}


def _get(doc: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = doc
    for key in path:
        node = node[key]
    return node


def _templates(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return dict(chart_tool.pod_templates(chart_tool.engine_workload(docs)))


def _env(template: dict[str, Any], container: str, name: str) -> str:
    found = chart_tool.container(template, container)
    assert found is not None, container
    (entry,) = [e for e in found["env"] if e["name"] == name]
    return str(entry["value"])


def _set(values: dict[str, Any], expression: str) -> dict[str, Any]:
    return chart_tool.deep_merge(values, helm.parse_set_string(expression))


def _set_json(values: dict[str, Any], expression: str) -> dict[str, Any]:
    return chart_tool.deep_merge(values, helm.parse_set_json(expression))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", list(PROFILES))
def test_should_change_both_envs_and_roll_pods_when_a_patch_is_turned_off(
    kind: str, name: str
) -> None:
    before_values = PROFILES[kind]
    after_values = _set(before_values, f"patches.disabled={{{name}}}")
    before = chart_tool.render_docs(before_values)
    after = chart_tool.render_docs(after_values)
    # make patch-off's own form renders the same objects.
    assert chart_tool.render_docs(_set_json(before_values, f'patches.disabled=["{name}"]')) == after

    before_pods, after_pods = _templates(before), _templates(after)
    assert (
        set(before_pods)
        == set(after_pods)
        == ({"single"} if kind == "deployment" else {"leader", "worker"})
    )
    for role, template in after_pods.items():
        for container in ("preflight", "engine"):
            assert _env(before_pods[role], container, "QWEN_NPU_DISABLE_PATCHES") == ""
            assert _env(template, container, "QWEN_NPU_DISABLE_PATCHES") == name
        # The pods roll: the config checksum on the pod template changes.
        old_sum = before_pods[role]["metadata"]["annotations"]["checksum/config"]
        new_sum = template["metadata"]["annotations"]["checksum/config"]
        assert old_sum != new_sum, role
        # Nothing else about the engine changes: same flags, same labels.
        assert chart_tool.engine_args(before, role) == chart_tool.engine_args(after, role)
        assert before_pods[role]["metadata"]["labels"] == template["metadata"]["labels"]

    # Identical selectors, and the new pods still match the workload's.
    before_index = {(d["kind"], d["metadata"]["name"]): d for d in before}
    after_index = {(d["kind"], d["metadata"]["name"]): d for d in after}
    assert before_index.keys() == after_index.keys()
    compared = 0
    for key, doc in after_index.items():
        path = SELECTORS.get(key[0])
        if path is not None:
            assert _get(before_index[key], path) == _get(doc, path), key
            compared += 1
    assert compared >= 4
    workload = chart_tool.engine_workload(after)
    if workload["kind"] == "Deployment":
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    else:
        assert workload["spec"]["leaderWorkerTemplate"]["size"] == 2


def test_should_restore_the_same_pods_when_the_patch_is_turned_back_on() -> None:
    values = PROFILES["deployment"]
    off = _set(values, "patches.disabled={mamba-scatter-ub-aware}")
    back_on = _set_json(off, "patches.disabled=[]")  # make patch-on PATCH=mamba-scatter-ub-aware
    assert chart_tool.render_docs(back_on) == chart_tool.render_docs(values)


def test_should_join_names_when_several_patches_are_off() -> None:
    values = _set(PROFILES["deployment"], f"patches.disabled={{{NAMES[0]},{NAMES[2]}}}")
    template = _templates(chart_tool.render_docs(values))["single"]
    for container in ("preflight", "engine"):
        assert _env(template, container, "QWEN_NPU_DISABLE_PATCHES") == f"{NAMES[0]},{NAMES[2]}"


def test_should_accept_exactly_the_registry_names_when_disabling_patches(repo: Any) -> None:
    """The chart's schema enum is the patch ledger: every name make patch-off takes renders."""
    schema = yaml.safe_load((repo / "helm/qwen-npu/values.schema.json").read_text())
    enum = schema["properties"]["patches"]["properties"]["disabled"]["items"]["enum"]
    assert enum == NAMES
    with pytest.raises(helm.HelmValuesError, match="/patches/disabled/0"):
        chart_tool.render(helm.parse_set_string("patches.disabled={all}"))


@pytest.mark.parametrize("kind", list(PROFILES))
def test_should_render_the_gdn_decode_route_for_both_containers(kind: str) -> None:
    """patches.gdnDecodeRoute beside the kill switch: the name and the values are the patch's own
    (gdn_decode_state_layout.ROUTE_ENV, ROUTES); in place unless set, copy as the fallback."""
    from qwen_npu.patches.fixes import gdn_decode_state_layout as gdn

    for setting, expected in ((None, gdn.IN_PLACE), (gdn.COPY, gdn.COPY)):
        values = PROFILES[kind]
        if setting is not None:
            values = _set(values, f"patches.gdnDecodeRoute={setting}")
        for template in _templates(chart_tool.render_docs(values)).values():
            for container in ("preflight", "engine"):
                assert _env(template, container, gdn.ROUTE_ENV) == expected


def test_should_accept_exactly_the_patch_routes_as_gdn_decode_route(repo: Any) -> None:
    from qwen_npu.patches.fixes import gdn_decode_state_layout as gdn

    schema = yaml.safe_load((repo / "helm/qwen-npu/values.schema.json").read_text())
    route = schema["properties"]["patches"]["properties"]["gdnDecodeRoute"]
    assert tuple(route["enum"]) == gdn.ROUTES and route["default"] == gdn.IN_PLACE
    with pytest.raises(helm.HelmValuesError, match="gdnDecodeRoute"):
        chart_tool.render(helm.parse_set_string("patches.gdnDecodeRoute=inplace"))
