"""The engine pod: command line, MTP switch, multi-node wiring, probes, volumes, NPUs, API key."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tools import chart as chart_tool
from tools.paths import REPO

DOC = REPO / "docs" / "chart.md"
UPSTREAM_PROFILE = chart_tool.PROFILES_DIR / "qwen3.6-35b-a3b-w8a8.yaml"


def documented_command() -> list[str]:
    """The command line docs/chart.md gives for the upstream pull request's checkpoint."""
    text = DOC.read_text()
    marker = "<!-- documented-command -->"
    assert marker in text, f"{DOC}: the marker {marker} is missing"
    block = text.split(marker, 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return shlex.split(block.replace("\\\n", " "))


def _env(template: dict[str, Any], name: str) -> dict[str, Any]:
    found = chart_tool.container(template, name)
    assert found is not None
    return {e["name"]: e for e in found.get("env", [])}


def test_should_equal_documented_command_when_rendering_upstream_checkpoint() -> None:
    command = documented_command()
    assert command[:3] == ["python3", "-m", "sglang.launch_server"]
    for values in ({}, chart_tool.values_from(UPSTREAM_PROFILE)):
        assert chart_tool.engine_args(chart_tool.render_docs(values)) == command[3:]
    assert "--speculative-draft-model-quantization" not in command


@pytest.mark.parametrize("profile", chart_tool.profiles(), ids=lambda p: p.stem)
def test_should_drop_every_speculative_flag_when_mtp_is_off(profile: Path) -> None:
    on = chart_tool.engine_args(chart_tool.render_docs(chart_tool.values_from(profile)))
    off_values = chart_tool.values_from(profile, extra={"mtp": {"enabled": False}})
    docs = chart_tool.render_docs(off_values)
    spec_flags = [a for a in on if a.startswith("--speculative-")]
    assert spec_flags == [
        "--speculative-algorithm",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
    ]
    for _, template in chart_tool.pod_templates(chart_tool.engine_workload(docs)):
        engine = chart_tool.container(template, "engine")
        assert engine is not None
        assert not [a for a in engine["args"] if "speculative" in str(a)]
    # Only the speculative flags and their values differ.
    off = chart_tool.engine_args(docs)
    stripped: list[str] = []
    index = 0
    while index < len(on):
        if on[index].startswith("--speculative-"):
            index += 2
            continue
        stripped.append(on[index])
        index += 1
    assert stripped == off


@pytest.mark.sglang
def test_should_parse_with_sglang_server_args_when_rendering_every_scenario(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    """SGLang 0.5.23's own parser accepts every rendered engine command line (all roles), and
    preflight's reader (the init container's --engine-args) lands on the same settings."""
    lines: dict[str, list[str]] = {}
    for name, docs in rendered_scenarios.items():
        for role, template in chart_tool.pod_templates(chart_tool.engine_workload(docs)):
            engine = chart_tool.container(template, "engine")
            assert engine is not None
            # Kubernetes expands $(VAR) from the container env; stand in plausible values.
            args = [
                str(a)
                .replace("$(LWS_GROUP_SIZE)", "2")
                .replace("$(LWS_WORKER_INDEX)", "1")
                .replace("$(LWS_LEADER_ADDRESS)", "qwen-npu-engine-0.qwen-npu-engine")
                .replace("$(QWEN_NPU_ENGINE_API_KEY)", "secret")
                for a in engine["args"]
            ]
            lines[f"{name}/{role}"] = args
    script = (
        "import json, sys\n"
        "from sglang.srt.server_args import prepare_server_args\n"
        "out = {}\n"
        "for key, args in json.load(sys.stdin).items():\n"
        "    a = prepare_server_args(args)\n"
        "    out[key] = [a.tp_size, a.speculative_algorithm, a.nnodes, a.model_path,\n"
        "                a.mamba_ssm_dtype, a.quantization, a.mem_fraction_static]\n"
        "print(json.dumps(out))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests" / "stubs")}
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        input=json.dumps(lines),
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert parsed["ci-default/single"][:5] == [
        2,
        "NEXTN",
        1,
        "/models/Qwen3.6-35B-A3B-w8a8",
        "bfloat16",
    ]
    assert parsed["ci-mtp-off/single"][1] is None
    assert parsed["qwen3.5-397b-a17b-w8a8-mtp-on/worker"][:3] == [16, "NEXTN", 2]
    from qwen_npu.preflight.engine_args import read_engine_args

    for key, args in lines.items():
        e = read_engine_args(args)
        tp, algorithm, _, model, dtype, quantization, fraction = parsed[key]
        assert [e.tp, e.speculative_algorithm, e.model_path] == [tp, algorithm, model], key
        assert [e.mamba_ssm_dtype, e.quantization, e.mem_fraction_static] == [
            dtype,
            quantization,
            fraction,
        ], key


def test_should_wire_lws_env_into_multinode_flags_when_nodes_above_one(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered_scenarios["qwen3.5-397b-a17b-w8a8-mtp-on"]
    lws = chart_tool.engine_workload(docs)
    assert lws["kind"] == "LeaderWorkerSet"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    for role in ("leader", "worker"):
        args = chart_tool.engine_args(docs, role)
        pairs = dict(itertools.pairwise(args))
        assert pairs["--nnodes"] == "$(LWS_GROUP_SIZE)"
        assert pairs["--node-rank"] == "$(LWS_WORKER_INDEX)"
        assert pairs["--dist-init-addr"] == "$(LWS_LEADER_ADDRESS):20000"
        assert pairs["--tp-size"] == "16"
    templates = dict(chart_tool.pod_templates(lws))
    assert chart_tool.container(templates["worker"], "sidecar") is None
    worker_engine = chart_tool.container(templates["worker"], "engine")
    assert worker_engine is not None and "startupProbe" not in worker_engine
    leader_engine = chart_tool.container(templates["leader"], "engine")
    assert leader_engine is not None
    assert leader_engine["resources"]["limits"]["huawei.com/Ascend910"] == "8"
    # Services select the leader only (node rank 0 serves HTTP).
    for svc in chart_tool.find(docs, "Service"):
        assert svc["spec"]["selector"]["qwen-npu.io/role"] == "leader"
    assert templates["leader"]["metadata"]["labels"]["qwen-npu.io/role"] == "leader"
    assert templates["worker"]["metadata"]["labels"]["qwen-npu.io/role"] == "worker"


@pytest.mark.parametrize("profile", chart_tool.profiles(), ids=lambda p: p.stem)
def test_should_request_tp_per_pod_npus_when_rendering_profile(profile: Path) -> None:
    values = chart_tool.values_from(profile)
    docs = chart_tool.render_docs(values)
    per_pod = values["engine"]["tpSize"] // values["engine"]["nodes"]
    for _, template in chart_tool.pod_templates(chart_tool.engine_workload(docs)):
        engine = chart_tool.container(template, "engine")
        assert engine is not None
        for side in ("requests", "limits"):
            assert engine["resources"][side]["huawei.com/Ascend910"] == str(per_pod)
        assert template["spec"]["nodeSelector"]["accelerator"] == "huawei-Ascend910"
        assert {"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"} in (
            template["spec"]["tolerations"]
        )
        shm = next(v for v in template["spec"]["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"] == {
            "medium": "Memory",
            "sizeLimit": values["engine"]["shmSizeLimit"],
        }


def test_should_probe_sidecar_within_startup_budget_when_rendering_defaults() -> None:
    docs = chart_tool.render_docs({"engine": {"startupBudgetSeconds": 2400}})
    template = chart_tool.engine_workload(docs)["spec"]["template"]
    engine = chart_tool.container(template, "engine")
    assert engine is not None
    for probe, path in (
        ("startupProbe", "/startupz"),
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/livez"),
    ):
        assert engine[probe]["httpGet"] == {"path": path, "port": 9400}
    startup = engine["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 2400
    sidecar_env = _env(template, "sidecar")
    assert sidecar_env["QWEN_NPU_STARTUP_BUDGET_S"]["value"] == "2400"
    deployment = chart_tool.engine_workload(docs)
    assert deployment["spec"]["progressDeadlineSeconds"] > 2400


def test_should_share_state_dir_when_engine_and_sidecar_run_together() -> None:
    docs = chart_tool.render_docs({})
    template = chart_tool.engine_workload(docs)["spec"]["template"]
    engine = chart_tool.container(template, "engine")
    sidecar = chart_tool.container(template, "sidecar")
    assert engine is not None and sidecar is not None
    state_dir = _env(template, "engine")["QWEN_NPU_STATE_DIR"]["value"]
    assert _env(template, "sidecar")["QWEN_NPU_STATE_DIR"]["value"] == state_dir
    mounts = {
        c["name"]: {m["mountPath"]: m["name"] for m in c["volumeMounts"]} for c in (engine, sidecar)
    }
    assert mounts["engine"][state_dir] == mounts["sidecar"][state_dir] == "state"
    state = next(v for v in template["spec"]["volumes"] if v["name"] == "state")
    assert "emptyDir" in state
    sidecar_env = _env(template, "sidecar")
    assert sidecar_env["QWEN_NPU_ENGINE_URL"]["value"] == "http://127.0.0.1:30000"
    assert sidecar_env["QWEN_NPU_SIDECAR_PORT"]["value"] == "9400"
    assert sidecar_env["QWEN_NPU_MODEL_DIR"]["value"] == "/models/Qwen3.6-35B-A3B-w8a8"
    assert sidecar_env["QWEN_NPU_TP_SIZE"]["value"] == "2"
    assert sidecar_env["QWEN_NPU_CANARY_INTERVAL_S"]["value"] == "60"
    assert sidecar_env["QWEN_NPU_LIVENESS_FAILURES"]["value"] == "3"
    engine_env = _env(template, "engine")
    assert engine_env["STREAMS_PER_DEVICE"]["value"] == "32"
    assert engine_env["HCCL_OP_EXPANSION_MODE"]["value"] == "AIV"
    assert engine_env["PYTORCH_NPU_ALLOC_CONF"]["value"] == "expandable_segments:True"


def test_should_run_preflight_with_engine_image_when_preflight_enabled() -> None:
    values = chart_tool.values_from(
        chart_tool.PROFILES_DIR / "qwen3.5-122b-a10b-w8a8.yaml",
        extra={"patches": {"disabled": ["mamba-scatter-ub-aware"]}},
    )
    template = chart_tool.engine_workload(chart_tool.render_docs(values))["spec"]["template"]
    preflight = chart_tool.container(template, "preflight")
    engine = chart_tool.container(template, "engine")
    assert preflight is not None and engine is not None
    assert preflight["image"] == engine["image"]
    assert preflight["command"] == ["qwen-npu", "preflight"]
    assert preflight["args"] == ["--npu-memory-gb", "64", "--engine-args", *engine["args"]]
    assert _env(template, "preflight")["QWEN_NPU_DISABLE_PATCHES"]["value"] == (
        "mamba-scatter-ub-aware"
    )
    assert _env(template, "engine")["QWEN_NPU_DISABLE_PATCHES"]["value"] == (
        "mamba-scatter-ub-aware"
    )
    off = chart_tool.render_docs({"preflight": {"enabled": False}})
    off_spec = chart_tool.engine_workload(off)["spec"]["template"]["spec"]
    assert [c["name"] for c in off_spec["initContainers"]] == ["sidecar"]


MODEL_SOURCES = {
    "pvc": (
        {"source": "pvc", "pvc": {"claimName": "models"}},
        {"persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
    ),
    "hostPath": (
        {"source": "hostPath", "hostPath": {"path": "/data/m"}},
        {"hostPath": {"path": "/data/m", "type": "Directory"}},
    ),
    "image": (
        {"source": "image", "image": {"reference": "r/m:1"}},
        {"image": {"reference": "r/m:1", "pullPolicy": "IfNotPresent"}},
    ),
}


@pytest.mark.parametrize(("source", "expected"), MODEL_SOURCES.values(), ids=MODEL_SOURCES)
def test_should_mount_model_read_only_when_choosing_source(
    source: dict[str, Any], expected: dict[str, Any]
) -> None:
    template = chart_tool.engine_workload(chart_tool.render_docs({"model": source}))["spec"][
        "template"
    ]
    model = next(v for v in template["spec"]["volumes"] if v["name"] == "model")
    assert {k: v for k, v in model.items() if k != "name"} == expected
    for c in template["spec"]["containers"] + template["spec"]["initContainers"]:
        mount = next(m for m in c["volumeMounts"] if m["name"] == "model")
        assert mount["readOnly"] is True


def test_should_hand_api_key_from_secret_when_existing_secret_set(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered_scenarios["ci-apikey"]
    ref = {"secretKeyRef": {"name": "qwen-npu-api-key", "key": "api-key"}}
    template = chart_tool.engine_workload(docs)["spec"]["template"]
    for name in ("engine", "sidecar"):
        assert _env(template, name)["QWEN_NPU_ENGINE_API_KEY"]["valueFrom"] == ref
    args = chart_tool.engine_args(docs)
    assert args[args.index("--api-key") + 1] == "$(QWEN_NPU_ENGINE_API_KEY)"
    test_pod = chart_tool.find(docs, "Pod")[0]
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    test_env = {e["name"]: e for e in test_pod["spec"]["containers"][0]["env"]}
    key_file = test_env["QWEN_NPU_ENGINE_API_KEY_FILE"]["value"]
    assert key_file == "/etc/qwen-npu/api-key/api-key"
    mount = next(
        m
        for m in test_pod["spec"]["containers"][0]["volumeMounts"]
        if key_file.startswith(m["mountPath"] + "/")
    )
    assert mount.get("readOnly") is True
    secret = next(v for v in test_pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert secret["secret"]["secretName"] == "qwen-npu-api-key"
    monitor = chart_tool.find(docs, "ServiceMonitor")[0]
    assert monitor["spec"]["endpoints"][0]["authorization"]["credentials"] == {
        "name": "qwen-npu-api-key",
        "key": "api-key",
    }
    # Without a Secret there is no key anywhere.
    plain = chart_tool.render_docs({})
    assert "--api-key" not in chart_tool.engine_args(plain)
    assert "API_KEY" not in json.dumps(chart_tool.engine_workload(plain))


def test_should_point_service_at_router_when_router_enabled(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered_scenarios["ci-router"]
    api = chart_tool.find(docs, "Service", "qwen-npu")[0]
    router = chart_tool.find(docs, "Deployment", "qwen-npu-router")[0]
    assert api["spec"]["selector"] == router["spec"]["selector"]["matchLabels"]
    assert api["spec"]["type"] == "NodePort"
    assert api["spec"]["ports"][0]["nodePort"] == 30080
    engine = chart_tool.engine_workload(docs)
    assert engine["spec"]["replicas"] == 2
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    selector = args[args.index("--selector") + 1 : args.index("--service-discovery-port")]
    labels = engine["spec"]["template"]["metadata"]["labels"]
    assert selector and all(labels[k] == v for k, v in (s.split("=", 1) for s in selector))
    role = chart_tool.find(docs, "Role")[0]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    # Without the router the Service selects the serving engine pods.
    plain = chart_tool.render_docs({})
    plain_api = chart_tool.find(plain, "Service", "qwen-npu")[0]
    assert plain_api["spec"]["selector"]["app.kubernetes.io/component"] == "engine"


def test_should_scale_on_queue_depth_when_autoscaling_enabled(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered_scenarios["ci-hpa"]
    hpa = chart_tool.find(docs, "HorizontalPodAutoscaler")[0]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "qwen-npu-engine",
    }
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "sglang_num_queue_reqs"
    assert "replicas" not in chart_tool.engine_workload(docs)["spec"]
    lws_hpa = chart_tool.find(rendered_scenarios["397b-hpa"], "HorizontalPodAutoscaler")[0]
    assert lws_hpa["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"


def test_should_never_mount_a_token_when_engine_runs(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered_scenarios["ci-default"]
    sa = chart_tool.find(docs, "ServiceAccount")[0]
    assert sa["automountServiceAccountToken"] is False
    spec = chart_tool.engine_workload(docs)["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    for c in spec["containers"] + spec["initContainers"]:
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_should_allow_api_and_metrics_only_when_network_policy_enabled(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    policy = chart_tool.find(rendered_scenarios["ci-default"], "NetworkPolicy")[0]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    ports = sorted({p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]})
    assert ports == [9400, 30000]
    multi = chart_tool.find(rendered_scenarios["ci-multinode"], "NetworkPolicy")[0]
    assert any("ports" not in rule for rule in multi["spec"]["ingress"])
    assert not chart_tool.find(rendered_scenarios["ci-minimal"], "NetworkPolicy")


def test_should_schedule_with_volcano_when_volcano_enabled(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    lws = chart_tool.engine_workload(rendered_scenarios["ci-multinode"])
    for _, template in chart_tool.pod_templates(lws):
        assert template["spec"]["schedulerName"] == "volcano"
        terms = template["spec"]["affinity"]["nodeAffinity"]
        assert terms["requiredDuringSchedulingIgnoredDuringExecution"]
    plain = chart_tool.engine_workload(rendered_scenarios["ci-default"])
    assert "schedulerName" not in plain["spec"]["template"]["spec"]


def test_should_roll_pods_when_canary_golden_changes() -> None:
    def checksum(golden: str) -> str:
        docs = chart_tool.render_docs({"sidecar": {"canaryGolden": golden}})
        template = chart_tool.engine_workload(docs)["spec"]["template"]
        return str(template["metadata"]["annotations"]["checksum/config"])

    assert checksum("Paris.") != checksum("Paris is the capital.")
    assert checksum("Paris.") == checksum("Paris.")


@pytest.mark.parametrize(
    ("service", "expected"),
    [
        ({"type": "ClusterIP"}, "kubectl -n llm port-forward svc/qwen-npu 30000:30000"),
        ({"type": "NodePort"}, "jsonpath='{.spec.ports[0].nodePort}'"),
        ({"type": "LoadBalancer"}, "jsonpath='{.status.loadBalancer.ingress[0].ip}'"),
    ],
    ids=["ClusterIP", "NodePort", "LoadBalancer"],
)
def test_should_print_pasteable_access_commands_when_service_type_varies(
    service: dict[str, Any], expected: str
) -> None:
    notes = chart_tool.render({"service": service})["qwen-npu/templates/NOTES.txt"]
    assert expected in notes
    assert "make bench CONC=10 TARGET=$TARGET" in notes
    assert "helm test qwen-npu -n llm --logs" in notes
    assert "docs/runbook.md" in notes


def test_should_run_the_sidecar_non_root_on_a_read_only_root_when_engine_runs(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    """Issue 5: the sidecar runs as a non-root user with a read-only root file system."""
    spec = chart_tool.engine_workload(rendered_scenarios["ci-default"])["spec"]["template"]["spec"]
    # A native sidecar (issue 15): an init container that keeps running beside the engine.
    sidecars = [c for c in spec["initContainers"] if c["name"] == "sidecar"]
    assert len(sidecars) == 1, [c["name"] for c in spec["initContainers"]]
    assert sidecars[0]["restartPolicy"] == "Always"
    assert "sidecar" not in [c["name"] for c in spec["containers"]]
    ctx = sidecars[0]["securityContext"]
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] != 0
