"""Every scenario renders, lints clean and passes strict schema validation.

Scenarios: every profile with MTP on and off, every ci/ overlay, and the LeaderWorkerSet profile
with the router, autoscaling and the API key (tools/chart/).

Each scenario is linted and validated once, against one Kubernetes minor, and the scenarios share
the minors out so that every minor the chart claims is used (`COVERING`): that catches a field a
minor lacks and a scenario that renders a bad object, in a few seconds. The full matrix (every
scenario on every minor, lint on the oldest and the newest) is the slow test below.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import yaml

from tools import chart as chart_tool
from tools.chart import __main__ as chart_cli

SCENARIOS = list(chart_tool.scenarios())


def _minors(name: str) -> list[str]:
    """The Kubernetes minors a scenario can run on (the image volume source needs 1.33)."""
    if not name.endswith("image-volume"):
        return chart_tool.KUBE_VERSIONS
    floor = tuple(map(int, chart_tool.IMAGE_VOLUME_MIN.split(".")))
    return [v for v in chart_tool.KUBE_VERSIONS if tuple(map(int, v.split("."))) >= floor]


def _covering() -> dict[str, str]:
    """Scenario -> one minor, dealt out in turn so that every minor gets scenarios."""
    minors, turn, out = chart_tool.KUBE_VERSIONS, 0, {}
    for name in SCENARIOS:
        while minors[turn % len(minors)] not in _minors(name):
            turn += 1
        out[name] = minors[turn % len(minors)]
        turn += 1
    return out


COVERING = _covering()


def test_should_use_every_kubernetes_minor_when_sharing_them_out() -> None:
    assert set(COVERING) == set(SCENARIOS)
    assert set(COVERING.values()) == set(chart_tool.KUBE_VERSIONS)
    assert all(minor in _minors(name) for name, minor in COVERING.items())


@pytest.mark.parametrize(
    ("name", "minor"), COVERING.items(), ids=[f"{n}-k8s{v}" for n, v in COVERING.items()]
)
def test_should_lint_clean_and_pass_strict_schemas_when_rendering_scenario(
    name: str,
    minor: str,
    scenario_values: dict[str, dict[str, Any]],
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    assert chart_tool.lint(scenario_values[name], versions=(minor,)) == []
    errors = [e for d in rendered_scenarios[name] for e in chart_tool.validate(d, minor)]
    assert errors == []


@pytest.mark.slow
@pytest.mark.parametrize("name", SCENARIOS)
def test_should_lint_clean_and_pass_strict_schemas_on_every_minor_when_rendering_scenario(
    name: str,
    scenario_values: dict[str, dict[str, Any]],
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    assert chart_tool.lint(scenario_values[name]) == []
    minors = [v for v in _minors(name) if v != COVERING[name]]
    errors = [
        e for v in minors for d in rendered_scenarios[name] for e in chart_tool.validate(d, v)
    ]
    assert errors == []


def test_should_reject_image_volume_when_kubernetes_predates_it(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    engine = chart_tool.engine_workload(rendered_scenarios["ci-image-volume"])
    errors = chart_tool.validate(engine, "1.30")
    assert any("'image' was unexpected" in e for e in errors)


def test_should_catch_misspelled_field_when_validating_strictly(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    engine = chart_tool.engine_workload(rendered_scenarios["ci-default"])
    engine["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    assert any("imagePullPolicyy" in e for e in chart_tool.validate(engine, "1.37"))


def test_should_validate_every_custom_resource_when_any_scenario_renders_one(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    seen = {
        (d["apiVersion"], d["kind"])
        for docs in rendered_scenarios.values()
        for d in docs
        if not chart_tool.is_builtin(d)
    }
    expected = {
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
    }
    assert expected <= seen
    assert seen <= set(chart_tool.CR_KINDS)


def test_should_reject_bad_lws_when_validating_against_kept_schema(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    lws = chart_tool.engine_workload(rendered_scenarios["qwen3.5-397b-a17b-w8a8-mtp-on"])
    assert lws["kind"] == "LeaderWorkerSet"
    lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["bogus"] = 1
    errors = chart_tool.validate(lws, "1.33")
    assert any("restartPolicy" in e for e in errors)
    assert any("workerTemplate" in e and "bogus" in e for e in errors)


def test_should_carry_versions_file_when_reading_chart_metadata(
    versions: dict[str, str], repo: Any
) -> None:
    """The images the chart renders by default are the ones make builds (their tag, the version)."""
    values = yaml.safe_load((repo / "helm/qwen-npu/values.yaml").read_text())
    docs = chart_tool.render_docs({})
    images = {c["image"] for c in _containers(chart_tool.engine_workload(docs))}
    assert images == {
        f"{values['image']['engine']['repository']}:{versions['QWEN_NPU_VERSION']}",
        f"{values['image']['sidecar']['repository']}:{versions['QWEN_NPU_VERSION']}",
    }


def test_should_claim_tested_kubernetes_versions_when_reading_kube_version(repo: Any) -> None:
    chart = yaml.safe_load((repo / "helm/qwen-npu/Chart.yaml").read_text())
    match = re.fullmatch(r">=(\d+)\.(\d+)\.0-0", chart["kubeVersion"])
    assert match is not None
    assert chart_tool.KUBE_VERSIONS[0] == f"{match[1]}.{match[2]}"


def test_should_package_when_running_chart_package(tmp_path: Any) -> None:
    assert chart_cli.main(["package", "--out", str(tmp_path)]) == 0
    version = chart_tool.chart().metadata["version"]
    assert (tmp_path / f"qwen-npu-{version}.tgz").is_file()


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _, template in chart_tool.pod_templates(workload):
        spec = template["spec"]
        out += spec["containers"] + spec.get("initContainers", [])
    return out


def test_should_pass_yamllint_when_checking_chart_yaml_files(repo: Any, tmp_path: Any) -> None:
    chart = repo / "helm" / "qwen-npu"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "yamllint",
            "-f",
            "parsable",
            "-c",
            str(chart / ".yamllint"),
            str(chart),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # yamllint really looks: a tab-indented file fails.
    bad = tmp_path / "values.yaml"
    bad.write_text("a:\n\t- b\n")
    probe = subprocess.run(
        [sys.executable, "-m", "yamllint", "-c", str(chart / ".yamllint"), str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert probe.returncode != 0
