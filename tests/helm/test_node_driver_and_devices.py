"""The first start on a real 910B/A3 node, as far as the chart decides it (issue 33): the driver's
version.info path and the label to schedule by reach the engine and preflight, nodes can be
selected by a driver-version label, the devices' group joins the pod's supplementalGroups, and the
verify op's draft limit (8) is the schema's."""

from __future__ import annotations

from typing import Any

import pytest

from qwen_npu.hardware.chips import VERIFY_MAX_DRAFT_TOKENS
from tools import chart as chart_tool

from .conftest import render_error


def _templates(values: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    docs = chart_tool.render_docs(values)
    return list(chart_tool.pod_templates(chart_tool.engine_workload(docs)))


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}


def test_draft_tokens_above_the_verify_ops_limit_are_refused_naming_the_key() -> None:
    assert VERIFY_MAX_DRAFT_TOKENS == 8
    message = render_error({"mtp": {"numDraftTokens": 9}})
    assert "mtp/numDraftTokens" in message and "want 8" in message
    for role, template in _templates({"mtp": {"numDraftTokens": 8}}):
        args = [str(a) for a in chart_tool.container(template, "engine")["args"]]
        assert args[args.index("--speculative-num-draft-tokens") + 1] == "8", role


@pytest.mark.parametrize("nodes", [1, 2])
def test_the_driver_file_and_label_reach_the_engine_and_preflight(nodes: int) -> None:
    values: dict[str, Any] = {
        "npu": {"driverVersionFile": "/host/driver/version.info"},
        "scheduling": {"driverVersion": {"nodeLabel": "example.com/hdk"}},
    }
    if nodes > 1:
        values |= {"engine": {"nodes": 2, "tpSize": 16}, "network": {"hcclSocketIfname": "eth0"}}
    for role, template in _templates(values):
        for name in ("engine", "preflight"):
            env = _env(chart_tool.container(template, name))
            assert env["QWEN_NPU_DRIVER_VERSION_FILE"] == "/host/driver/version.info", (role, name)
            assert env["QWEN_NPU_HDK_NODE_LABEL"] == "example.com/hdk", (role, name)
        # no rule unless asked: an unlabelled pool still schedules
        assert "affinity" not in template["spec"], role


def test_nodes_are_selected_by_the_driver_label_in_every_affinity_term() -> None:
    user_terms = [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
    ]
    values = {
        "scheduling": {
            "driverVersion": {"values": ["25.2", "25.3"]},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": user_terms
                    }
                },
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
            },
        }
    }
    rule = {"key": "qwen-npu.io/ascend-hdk", "operator": "In", "values": ["25.2", "25.3"]}
    for role, template in _templates(values):
        affinity = template["spec"]["affinity"]
        assert "podAntiAffinity" in affinity, role  # the user's affinity is kept
        terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert len(terms) == 2
        assert terms[0]["matchExpressions"] == [user_terms[0]["matchExpressions"][0], rule]
        assert terms[1]["matchExpressions"] == [rule] and "matchFields" in terms[1]
    alone = _templates({"scheduling": {"driverVersion": {"values": ["25.2"]}}})
    for _, template in alone:
        (term,) = template["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert term == {"matchExpressions": [rule | {"values": ["25.2"]}]}


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"values": ["25"]}, 'scheduling.driverVersion.values has "25"'),
        ({"values": ["25.2"], "nodeLabel": ""}, "scheduling.driverVersion.nodeLabel is empty"),
    ],
)
def test_a_bad_driver_rule_is_refused(values: dict[str, Any], needle: str) -> None:
    assert needle in render_error({"scheduling": {"driverVersion": values}})


def test_the_device_group_joins_the_pods_supplemental_groups() -> None:
    for _, template in _templates({"npu": {"deviceGroupId": 1001}}):
        security = template["spec"]["securityContext"]
        assert security["supplementalGroups"] == [1001]
        assert (
            security["runAsUser"] == 1000 and security["seccompProfile"]["type"] == "RuntimeDefault"
        )
    merged = {
        "npu": {"deviceGroupId": 1001},
        "podSecurityContext": {"supplementalGroups": [5, 1001]},
    }
    for _, template in _templates(merged):
        assert template["spec"]["securityContext"]["supplementalGroups"] == [5, 1001]
    for _, template in _templates({"npu": {"deviceGroupId": 0}}):
        assert "supplementalGroups" not in template["spec"]["securityContext"]


def test_with_host_path_preflight_reads_the_drivers_version_file() -> None:
    values = {"npu": {"runtime": "hostPath", "driverVersionFile": "/opt/v.info"}}
    for role, template in _templates(values):
        mounts = {m["name"]: m for m in chart_tool.container(template, "preflight")["volumeMounts"]}
        assert mounts["ascend-driver"] == {
            "name": "ascend-driver",
            "mountPath": "/opt/v.info",
            "subPath": "version.info",
            "readOnly": True,
        }, role


def test_the_draft_quantization_flag_only_when_asked_and_only_with_mtp() -> None:
    def engine_args(values: dict[str, Any]) -> list[str]:
        ((_, template),) = _templates(values)
        return [str(a) for a in chart_tool.container(template, "engine")["args"]]

    assert "--speculative-draft-model-quantization" not in engine_args({})
    args = engine_args({"mtp": {"draftQuantization": "unquant"}})
    assert args[args.index("--speculative-draft-model-quantization") + 1] == "unquant"
    off = engine_args({"mtp": {"enabled": False, "draftQuantization": "unquant"}})
    assert "--speculative-draft-model-quantization" not in off
    message = render_error(
        {"engine": {"extraArgs": ["--speculative-draft-model-quantization", "unquant"]}}
    )
    assert "mtp.draftQuantization" in message


def _host_file_seen_at(template: dict[str, Any], name: str, path: str) -> tuple[str, bool] | None:
    """The node's file container `name` sees at `path` (through a hostPath volume), and whether
    the mount is read-only; None when no hostPath mount covers the path."""
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    found = chart_tool.container(template, name)
    assert found is not None, name
    for mount in found.get("volumeMounts", []):
        where = mount["mountPath"].rstrip("/")
        if path != where and not path.startswith(where + "/"):
            continue
        host = volumes[mount["name"]].get("hostPath")
        if host is None:
            continue
        inside = mount.get("subPath", "") or path[len(where) :].lstrip("/")
        if host.get("type") == "File":
            assert not inside, (name, mount)
            return host["path"], bool(mount.get("readOnly"))
        return f"{host['path'].rstrip('/')}/{inside}", bool(mount.get("readOnly"))
    return None


@pytest.mark.parametrize("runtime", sorted(chart_tool.RUNTIMES))
def test_the_engine_and_preflight_see_the_nodes_version_info_in_every_runtime_mode(
    rendered_scenarios: dict[str, list[dict[str, Any]]], runtime: str
) -> None:
    """Issue 41, item 2: the Ascend Docker Runtime never mounts driver/version.info, and the
    preflight init container gets nothing injected (it requests no NPU): the chart mounts the
    node's file read-only where the entrypoint and preflight read it, in every profile."""
    suffix = chart_tool.RUNTIMES[runtime]
    checked = 0
    for profile in chart_tool.profiles():
        docs = rendered_scenarios[f"{profile.stem}-mtp-on{suffix}"]
        for role, template in chart_tool.pod_templates(chart_tool.engine_workload(docs)):
            for name in ("engine", "preflight"):
                env = _env(chart_tool.container(template, name))
                path = env["QWEN_NPU_DRIVER_VERSION_FILE"]
                assert path == "/usr/local/Ascend/driver/version.info"
                seen = _host_file_seen_at(template, name, path)
                assert seen == ("/usr/local/Ascend/driver/version.info", True), (
                    profile.stem,
                    role,
                    name,
                    seen,
                )
                checked += 1
    assert checked >= 2 * len(chart_tool.profiles())


def test_in_runtime_mode_the_file_alone_is_mounted_as_a_file_at_the_value() -> None:
    values = {"npu": {"driverVersionFile": "/opt/drv/version.info"}}
    for role, template in _templates(values):
        (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == "ascend-driver-version"]
        assert volume["hostPath"] == {"path": "/opt/drv/version.info", "type": "File"}, role
        for name in ("engine", "preflight"):
            assert _host_file_seen_at(template, name, "/opt/drv/version.info") == (
                "/opt/drv/version.info",
                True,
            ), (role, name)
        # nothing else of the driver: the runtime injects lib64 and include itself
        assert not any(v["name"] == "ascend-driver" for v in template["spec"]["volumes"]), role
    host = {"npu": {"runtime": "hostPath"}}
    for role, template in _templates(host):
        names = {v["name"] for v in template["spec"]["volumes"]}
        assert "ascend-driver-version" not in names and "ascend-driver" in names, role
