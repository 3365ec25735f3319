"""The engine image and the pod the chart gives it agree (issue 22): the chart owns the CPU
affinity variable and the image bakes none; the image's HOME, where CANN's logs and every compiler
cache live, is an emptyDir in the pod (writable for any uid) and the hostPath overlay mounts the
node's logs where CANN writes them; hostPath mode mounts no device node (a mounted one grants no
access) and its `privileged` switch is the one way to every device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tools import chart as chart_tool
from tools.paths import CHART_DIR

from .dockerfile_parse import key_values, parse

CACHE_VARIABLES = (
    "XDG_CACHE_HOME",
    "ASCEND_PROCESS_LOG_PATH",
    "ASCEND_CACHE_PATH",
    "ASCEND_WORK_PATH",
    "TRITON_CACHE_DIR",
)


@pytest.fixture(scope="module")
def image_env(repo: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for inst in parse(repo / "docker" / "engine.Dockerfile").stage("engine").all("ENV"):
        env.update(key_values(inst.args))
    return env


def _pod(values: dict[str, Any] | None = None) -> dict[str, Any]:
    docs = chart_tool.render_docs(values)
    ((_, template),) = chart_tool.pod_templates(chart_tool.engine_workload(docs))
    return template


def _engine(template: dict[str, Any]) -> dict[str, Any]:
    engine = chart_tool.container(template, "engine")
    assert engine is not None
    return engine


def _hostpath(**npu: Any) -> dict[str, Any]:
    return chart_tool.values_from(
        chart_tool.CI_DIR / "npu-hostpath-values.yaml", extra={"npu": {"hostPath": npu}}
    )


def test_the_chart_always_sets_the_cpu_affinity_and_the_image_does_not(
    image_env: dict[str, str],
) -> None:
    assert "SGLANG_SET_CPU_AFFINITY" not in image_env
    env = {e["name"]: e.get("value") for e in _engine(_pod()).get("env", [])}
    assert env["SGLANG_SET_CPU_AFFINITY"] == "0"  # the default pod shares its CPUs: off


def test_home_and_every_cache_are_an_empty_dir_in_the_pod(image_env: dict[str, str]) -> None:
    home = image_env["HOME"]
    for key in CACHE_VARIABLES:
        assert image_env[key].startswith(home + "/"), key
    template = _pod()
    mounts = {m["mountPath"]: m["name"] for m in _engine(template)["volumeMounts"]}
    assert home in mounts, f"nothing is mounted at the image's HOME {home}"
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    volume = volumes[mounts[home]]
    assert set(volume) == {"name", "emptyDir"}  # writable whatever runAsUser is
    # The chart passes none of them: the image's values hold, and a runAsUser other than the
    # image's user (no passwd entry: HOME would be /) changes nothing.
    names = {e["name"] for e in _engine(template).get("env", [])}
    assert not names & {"HOME", *CACHE_VARIABLES}
    other_uid = _pod({"engine": {"securityContext": {"runAsUser": 4242, "runAsGroup": 4242}}})
    assert _engine(other_uid)["securityContext"]["runAsUser"] == 4242
    assert home in {m["mountPath"] for m in _engine(other_uid)["volumeMounts"]}


def test_the_hostpath_overlay_mounts_the_node_logs_where_cann_writes_them(
    image_env: dict[str, str],
) -> None:
    template = _pod(chart_tool.values_from(chart_tool.CI_DIR / "npu-hostpath-values.yaml"))
    mounts = {m["name"]: m["mountPath"] for m in _engine(template)["volumeMounts"]}
    assert mounts["ascend-logs"] == image_env["ASCEND_PROCESS_LOG_PATH"]


def test_hostpath_mode_mounts_no_device_node(image_env: dict[str, str]) -> None:
    template = _pod(_hostpath())
    kinds = {v["name"]: (v.get("hostPath") or {}).get("type") for v in template["spec"]["volumes"]}
    assert "CharDevice" not in kinds.values(), kinds
    assert not [
        m
        for m in _engine(template)["volumeMounts"]
        if m["mountPath"].startswith("/dev/") and m["mountPath"] != "/dev/shm"
    ]
    security = _engine(template)["securityContext"]
    assert "privileged" not in security and security["allowPrivilegeEscalation"] is False


def test_the_privileged_switch_grants_every_device_and_says_so() -> None:
    template = _pod(_hostpath(privileged=True))
    security = _engine(template)["securityContext"]
    assert security["privileged"] is True
    # The API server rejects privileged with allowPrivilegeEscalation false.
    assert security["allowPrivilegeEscalation"] is True
    for version in (chart_tool.KUBE_VERSIONS[0], chart_tool.KUBE_VERSIONS[-1]):
        docs = chart_tool.render_docs(_hostpath(privileged=True))
        assert not chart_tool.validate(chart_tool.engine_workload(docs), version)
    # Only the engine, and only in hostPath mode.
    for other in ("sidecar", "preflight"):
        found = chart_tool.container(template, other)
        assert found is None or not (found.get("securityContext") or {}).get("privileged"), other
    plain = _pod({"npu": {"hostPath": {"privileged": True}}})  # ascend-docker-runtime
    assert "privileged" not in _engine(plain)["securityContext"]
    schema = CHART_DIR / "values.schema.json"
    text = schema.read_text()
    assert "every device of the node" in text and "every capability" in text
