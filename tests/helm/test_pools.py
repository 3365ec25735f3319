"""Ascend pools for real (issue 14): HCCL/Gloo wiring, hostNetwork, device runtimes, extra
volumes and environment, the NPU count the entrypoint checks, Volcano gang scheduling, CPU
affinity, chips."""

from __future__ import annotations

import copy
from typing import Any

import helm_python as helm
import pytest

from tools import chart as chart_tool

P = chart_tool.PROFILES_DIR
BIG = chart_tool.values_from(P / "qwen3.5-397b-a17b-w8a8.yaml")


def _templates(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return dict(chart_tool.pod_templates(chart_tool.engine_workload(docs)))


def _env(container: dict[str, Any] | None) -> dict[str, Any]:
    assert container is not None
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _render_error(values: dict[str, Any]) -> str:
    with pytest.raises((helm.HelmRenderError, helm.HelmValuesError)) as caught:
        chart_tool.render(values)
    return str(caught.value)


def test_should_use_loopback_for_hccl_and_gloo_when_one_node(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    (template,) = _templates(rendered_scenarios["ci-default"]).values()
    for name in ("engine", "preflight"):
        env = _env(chart_tool.container(template, name))
        assert env["HCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "lo"
        assert "HCCL_IF_IP" not in env
    assert "hostNetwork" not in template["spec"]


def test_should_wire_pod_interface_and_pod_ip_when_several_nodes(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    templates = _templates(rendered_scenarios["ci-multinode"])
    assert set(templates) == {"leader", "worker"}
    for role, template in templates.items():
        env = _env(chart_tool.container(template, "engine"))
        assert env["HCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0", role
        assert env["HCCL_IF_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}, role
        assert env["QWEN_NPU_EXPECTED_NPUS"] == "8", role
        args = chart_tool.engine_args(rendered_scenarios["ci-multinode"], role)
        assert args[args.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):20000"
    # A separate Gloo interface when given.
    values = chart_tool.deep_merge(BIG, {"network": {"glooSocketIfname": "eth1"}})
    env = _env(chart_tool.container(_templates(chart_tool.render_docs(values))["worker"], "engine"))
    assert (env["HCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("eth0", "eth1")


def test_should_join_node_network_and_mount_hccn_conf_when_host_network(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered_scenarios["ci-hostnetwork"]
    lws = chart_tool.engine_workload(docs)
    for role, template in _templates(docs).items():
        spec = template["spec"]
        assert spec["hostNetwork"] is True, role
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet", role
        volume = next(v for v in spec["volumes"] if v["name"] == "hccn-conf")
        assert volume["hostPath"] == {"path": "/etc/hccn.conf", "type": "File"}
        engine = chart_tool.container(template, "engine")
        assert engine is not None
        mount = next(m for m in engine["volumeMounts"] if m["name"] == "hccn-conf")
        assert mount == {"name": "hccn-conf", "mountPath": "/etc/hccn.conf", "readOnly": True}
        assert _env(engine)["HCCL_SOCKET_IFNAME"] == "enp189s0f0"
    skips = " ".join(lws["metadata"]["annotations"].values())
    assert "CKV_K8S_19=" in skips
    assert "CKV_K8S_19" not in str(chart_tool.engine_workload(rendered_scenarios["ci-multinode"]))


HOST_FILES = {
    "ascend-driver": ("/usr/local/Ascend/driver", "Directory", True),
    "ascend-dcmi": ("/usr/local/dcmi", "Directory", True),
    "ascend-npu-smi": ("/usr/local/bin/npu-smi", "File", True),
    "ascend-install-info": ("/etc/ascend_install.info", "File", True),
}


def test_should_mount_driver_and_devices_when_runtime_is_host_path(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    (template,) = _templates(rendered_scenarios["ci-npu-hostpath"]).values()
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    engine = chart_tool.container(template, "engine")
    assert engine is not None
    mounts = {m["name"]: m for m in engine["volumeMounts"]}
    for name, (path, kind, read_only) in HOST_FILES.items():
        assert volumes[name]["hostPath"] == {"path": path, "type": kind}, name
        assert mounts[name] == {"name": name, "mountPath": path, "readOnly": read_only}
    # Only the engine touches the NPUs; preflight reads the driver's version.info alone.
    for other in ("sidecar", "preflight"):
        found = chart_tool.container(template, other)
        assert found is not None
        host = [m for m in found["volumeMounts"] if m["name"] in HOST_FILES]
        if other == "preflight":
            assert host == [
                {
                    "name": "ascend-driver",
                    "mountPath": "/usr/local/Ascend/driver/version.info",
                    "subPath": "version.info",
                    "readOnly": True,
                }
            ]
        else:
            assert not host, other
    # The default runtime mounts none of it.
    (plain,) = _templates(rendered_scenarios["ci-default"]).values()
    assert not {v["name"] for v in plain["spec"]["volumes"]} & set(HOST_FILES)


def test_should_render_every_profile_when_runtime_is_host_path(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    names = [n for n in rendered_scenarios if n.startswith("qwen") and n.endswith("-npu-hostpath")]
    assert len(names) == 2 * len(chart_tool.profiles())
    for name in names:
        for role, template in _templates(rendered_scenarios[name]).items():
            volumes = {v["name"] for v in template["spec"]["volumes"]}
            assert set(HOST_FILES) <= volumes, (name, role)


def test_should_pass_extra_volumes_env_and_mounts_when_given(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    (template,) = _templates(rendered_scenarios["ci-npu-hostpath"]).values()
    volumes = {v["name"] for v in template["spec"]["volumes"]}
    assert {"ascend-logs", "sidecar-config"} <= volumes
    engine = chart_tool.container(template, "engine")
    sidecar = chart_tool.container(template, "sidecar")
    assert engine is not None and sidecar is not None
    logs = {"name": "ascend-logs", "mountPath": "/var/lib/qwen-npu/home/ascend/log"}
    # Where CANN writes them: ASCEND_PROCESS_LOG_PATH (tests/docker/test_engine_pod.py).
    assert logs in engine["volumeMounts"]
    assert engine["envFrom"] == [{"configMapRef": {"name": "qwen-npu-engine-extra"}}]
    assert {
        "name": "sidecar-config",
        "mountPath": "/etc/qwen-npu/extra",
        "readOnly": True,
    } in sidecar["volumeMounts"]
    assert sidecar["envFrom"] == [{"secretRef": {"name": "qwen-npu-sidecar-extra"}}]


@pytest.mark.parametrize("profile", chart_tool.profiles(), ids=lambda p: p.stem)
def test_should_tell_the_entrypoint_the_npu_count_when_rendering_profile(profile: Any) -> None:
    values = chart_tool.values_from(profile)
    per_pod = str(values["engine"]["tpSize"] // values["engine"]["nodes"])
    for role, template in _templates(chart_tool.render_docs(values)).items():
        engine = chart_tool.container(template, "engine")
        assert _env(engine)["QWEN_NPU_EXPECTED_NPUS"] == per_pod, role
        assert engine is not None
        assert engine["resources"]["limits"]["huawei.com/Ascend910"] == per_pod


def test_should_gang_schedule_each_group_with_volcano_when_multi_node(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    lws = chart_tool.engine_workload(rendered_scenarios["ci-multinode"])
    assert lws["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "inference"
    assert lws["spec"]["startupPolicy"] == "LeaderCreated"
    for template in _templates(rendered_scenarios["ci-multinode"]).values():
        assert template["spec"]["schedulerName"] == "volcano"
    group = chart_tool.volcano_podgroup(lws)
    assert group is not None
    assert group["spec"]["minMember"] == 2
    assert group["spec"]["queue"] == "inference"
    assert group["spec"]["minResources"]["huawei.com/Ascend910"] == "16"
    # Leader: engine 16 CPUs + sidecar 100m; worker: engine 16 CPUs (preflight runs before them).
    assert group["spec"]["minResources"]["cpu"] == "32100m"
    for version in (chart_tool.KUBE_VERSIONS[0], chart_tool.KUBE_VERSIONS[-1]):
        assert chart_tool.validate(group, version) == []
        assert chart_tool.validate(lws, version) == []
    notes = chart_tool.render(chart_tool.values_from(chart_tool.CI_DIR / "multinode-values.yaml"))
    assert (
        "gangSchedulingManagement.schedulerProvider=volcano"
        in notes["qwen-npu/templates/NOTES.txt"]
    )
    # Without Volcano there is no PodGroup; a single-node Deployment never has one.
    assert (
        chart_tool.volcano_podgroup(chart_tool.engine_workload(chart_tool.render_docs(BIG))) is None
    )


def test_should_reject_a_bad_podgroup_when_validating_against_volcano_schema(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    group = chart_tool.volcano_podgroup(
        chart_tool.engine_workload(rendered_scenarios["ci-multinode"])
    )
    assert group is not None
    bad = copy.deepcopy(group)
    bad["spec"]["minMember"] = "two"
    bad["spec"]["minResources"]["cpu"] = "lots"
    bad["spec"]["minAvailable"] = 2
    bad["spec"]["networkTopology"] = {"mode": "strict"}
    errors = " ".join(chart_tool.validate(bad, "1.33"))
    for fragment in ("minMember", "lots", "minAvailable", "strict"):
        assert fragment in errors


def test_should_pin_cpus_only_when_pod_has_exclusive_cpuset(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    def affinity(docs: list[dict[str, Any]]) -> set[Any]:
        return {
            _env(chart_tool.container(t, "engine")).get("SGLANG_SET_CPU_AFFINITY")
            for t in _templates(docs).values()
        }

    # Always rendered: the image bakes none.
    assert affinity(rendered_scenarios["ci-default"]) == {"0"}
    assert affinity(rendered_scenarios["ci-guaranteed"]) == {"1"}
    assert affinity(rendered_scenarios["397b-guaranteed"]) == {"1"}
    guaranteed = chart_tool.values_from(chart_tool.CI_DIR / "guaranteed-values.yaml")
    off = chart_tool.deep_merge(guaranteed, {"engine": {"cpuAffinity": "off"}})
    assert affinity(chart_tool.render_docs(off)) == {"0"}
    # Fractional CPUs get no exclusive cpuset from the static CPU manager.
    half = chart_tool.deep_merge(
        guaranteed,
        {"engine": {"resources": {"requests": {"cpu": "15500m"}, "limits": {"cpu": "15500m"}}}},
    )
    assert affinity(chart_tool.render_docs(half)) == {"0"}
    # The guaranteed engine has a CPU limit, so it no longer skips CKV_K8S_11.
    skips = chart_tool.engine_workload(rendered_scenarios["ci-guaranteed"])["metadata"][
        "annotations"
    ]
    assert not any(v.startswith("CKV_K8S_11") for v in skips.values())


def test_should_run_the_a3_engine_build_when_a3_overlay_or_profile(
    rendered_scenarios: dict[str, list[dict[str, Any]]], versions: dict[str, str]
) -> None:
    version = versions["QWEN_NPU_VERSION"]
    for name in ("122b-a3", "qwen3.5-397b-a17b-w8a8-a3-mtp-on"):
        (template,) = _templates(rendered_scenarios[name]).values()
        for container in ("engine", "preflight"):
            found = chart_tool.container(template, container)
            assert found is not None, (name, container)
            assert found["image"].endswith(f":{version}-a3"), (name, container)
        sidecar = chart_tool.container(template, "sidecar")
        assert sidecar is not None and sidecar["image"].endswith(f":{version}")
        # both A3 server kinds, by affinity (tests/helm/test_a3_placement.py)
        assert "accelerator-type" not in template["spec"]["nodeSelector"]
    a3 = chart_tool.engine_workload(rendered_scenarios["qwen3.5-397b-a17b-w8a8-a3-mtp-on"])
    assert a3["kind"] == "Deployment"
    engine = chart_tool.container(a3["spec"]["template"], "engine")
    assert engine is not None and engine["resources"]["limits"]["huawei.com/Ascend910"] == "16"


def test_should_pass_parsers_to_sglang_when_set(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    args = chart_tool.engine_args(rendered_scenarios["ci-parsers"])
    assert args[args.index("--reasoning-parser") + 1] == "qwen3"
    assert args[args.index("--tool-call-parser") + 1] == "qwen3_coder"
    plain = chart_tool.engine_args(rendered_scenarios["ci-default"])
    assert "--reasoning-parser" not in plain and "--tool-call-parser" not in plain


@pytest.mark.sglang
def test_should_offer_only_names_sglang_accepts_when_reading_parser_enums(repo: Any) -> None:
    """The values schema's parser names are SGLang 0.5.23's (its dependency-free name lists)."""
    import json

    from sglang.srt.function_call.parser_names import TOOL_CALL_PARSER_NAMES
    from sglang.srt.parser.reasoning_parser_names import REASONING_PARSER_NAMES

    schema = json.loads((repo / "helm/qwen-npu/values.schema.json").read_text())
    engine = schema["properties"]["engine"]["properties"]
    reasoning = set(engine["reasoningParser"]["enum"]) - {"", "auto"}
    tools = set(engine["toolCallParser"]["enum"]) - {"", "auto"}
    assert reasoning <= set(REASONING_PARSER_NAMES)
    assert tools <= set(TOOL_CALL_PARSER_NAMES)
    assert {"qwen3"} <= reasoning and {"qwen3_coder"} <= tools


BAD_POOL_VALUES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "multinode-without-network": (
        {"engine": {"tpSize": 16, "nodes": 2}, "model": {"linearNumValueHeads": 64}},
        ["network.hcclSocketIfname is empty", "engine.nodes is 2"],
    ),
    "multinode-on-loopback": (
        chart_tool.deep_merge(BIG, {"network": {"hcclSocketIfname": "lo"}}),
        ["network.hcclSocketIfname is lo"],
    ),
    "tp-not-divisible-by-nodes": (
        {"engine": {"tpSize": 16, "nodes": 3}, "model": {"linearNumValueHeads": 64},
         "network": {"hcclSocketIfname": "eth0"}},
        ["engine.tpSize (16) must be a multiple of engine.nodes (3)"],
    ),
    "host-network-clashing-ports": (
        {"network": {"hostNetwork": True}, "sidecar": {"port": 30000}},
        ["sidecar.port (30000) equals service.port", "network.hostNetwork"],
    ),
    "host-network-port-in-use": (
        {"network": {"hostNetwork": True}, "sidecar": {"port": 9100}},
        ["sidecar.port (9100) is in network.hostPortsInUse"],
    ),
    "host-network-dist-init-clash": (
        chart_tool.deep_merge(
            BIG, {"network": {"hostNetwork": True}, "engine": {"distInitPort": 30000}}
        ),
        ["service.port (30000) equals engine.distInitPort"],
    ),
    "host-path-runtime-without-driver": (
        {"npu": {"runtime": "hostPath", "hostPath": {"driverPath": ""}}},
        ["npu.hostPath.driverPath is empty"],
    ),
    "ascend-env-sets-ifname": (
        {"engine": {"ascendEnv": {"HCCL_SOCKET_IFNAME": "eth0"}}},
        ["engine.ascendEnv sets HCCL_SOCKET_IFNAME", "network.hcclSocketIfname"],
    ),
    "extra-env-sets-cpu-affinity": (
        {"engine": {"extraEnv": [{"name": "SGLANG_SET_CPU_AFFINITY", "value": "1"}]}},
        ["engine.extraEnv sets SGLANG_SET_CPU_AFFINITY", "engine.cpuAffinity"],
    ),
    "affinity-on-burstable": (
        {"engine": {"cpuAffinity": "on"}},
        ["engine.cpuAffinity is on but the engine pod is not Guaranteed"],
    ),
    "unknown-runtime": ({"npu": {"runtime": "docker"}}, ["/npu/runtime"]),
    "unknown-parser": ({"engine": {"toolCallParser": "qwen3-coder"}}, ["/engine/toolCallParser"]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_POOL_VALUES))
def test_should_fail_naming_the_value_when_pool_values_are_bad(case: str) -> None:
    values, fragments = BAD_POOL_VALUES[case]
    message = _render_error(values)
    for fragment in fragments:
        assert fragment in message
