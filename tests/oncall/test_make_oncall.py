"""The kill-switch targets (mk/oncall.mk -> qwen-npu oncall) build the right helm and kubectl
command lines (recording stand-ins for both first on PATH), print each command they run, find the
engine's name and kind in the release's manifest, wait for the rollout and the sidecar, refuse bad
input before touching the cluster, and fail when a step fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make

from qwen_npu.patches.registry import PATCHES as REGISTRY
from tools import chart as chart_tool
from tools.paths import CHART_DIR

from .stand_ins import calls, errors, install, printed, ran

PATCHES = [p.name for p in REGISTRY]
MULTINODE = chart_tool.values_from(chart_tool.CI_DIR / "multinode-values.yaml")
#: The releases the helm stand-in knows: name -> chart values of its manifest.
RELEASES = {
    "qwen-npu": {},
    "prod": {},
    "qwen-npu-canary": {},
    "renamed": {"nameOverride": "llm"},
    "pinned": {"fullnameOverride": "serving"},
    "big": MULTINODE,
}
SERVING = (
    "app.kubernetes.io/instance={r},app.kubernetes.io/component=engine,qwen-npu.io/role=leader"
)


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    return install(tmp_path / "bin", RELEASES)


def wait_calls(
    release: str = "qwen-npu", namespace: str = "default", deployment: str | None = None
) -> list[list[str]]:
    """The waiting steps every kill switch ends with: the release's manifest names the engine."""
    ns = ["kubectl", "--namespace", namespace]
    serving = SERVING.format(r=release)
    steps = [["helm", "get", "manifest", release, "--namespace", namespace]]
    if deployment is not None:
        steps.append([*ns, "rollout", "status", f"deployment/{deployment}", "--timeout=35m"])
    steps += [
        [*ns, "wait", "--for=condition=Ready", "pod", "--selector", serving, "--timeout=35m"],
        [*ns, "get", "pod", "--selector", serving, "-o", "jsonpath={.items[0].metadata.name}"],
    ]
    return steps


def exec_readyz(call: list[str], namespace: str = "default") -> None:
    assert call[:8] == [
        "kubectl",
        "--namespace",
        namespace,
        "exec",
        "qwen-npu-engine-7d9f-abcde",
        "-c",
        "sidecar",
        "--",
    ]
    assert call[8:10] == ["python3", "-c"] and "http://127.0.0.1:9400/readyz" in call[10]


def helm_upgrade(release: str = "qwen-npu", namespace: str = "default") -> list[str]:
    """The switch's ``helm upgrade`` up to its ``--set``: the release's own values kept."""
    chart = str(CHART_DIR)  # the checkout's chart by absolute path, not relative to the folder
    return ["helm", "upgrade", release, chart, "--namespace", namespace, "--reuse-values"]


def test_mtp_off_upgrades_with_reuse_values_then_waits(repo: Path, env: dict[str, str]) -> None:
    done, seen = ran(repo, env, "mtp-off")
    assert seen[0] == [*helm_upgrade(), "--set", "mtp.enabled=false"]
    assert seen[1:5] == wait_calls(deployment="qwen-npu-engine")
    exec_readyz(seen[5])
    assert len(seen) == 6
    # Every command that changes or waits was printed, exactly as run.
    assert printed(done) == [seen[0], seen[2], seen[3], seen[5]]
    assert done.stdout.rstrip().endswith(
        "mtp-off: done, release qwen-npu in default is ready (make status for details)"
    )


def test_mtp_on_with_release_and_namespace(repo: Path, env: dict[str, str]) -> None:
    _, seen = ran(repo, env, "mtp-on", "RELEASE=prod", "NAMESPACE=llm")
    assert seen[0] == [*helm_upgrade("prod", "llm"), "--set", "mtp.enabled=true"]
    # The chart's fullname rule: "prod" lacks the chart name -> Deployment prod-qwen-npu-engine.
    assert seen[1:5] == wait_calls("prod", "llm", deployment="prod-qwen-npu-engine")
    exec_readyz(seen[5], "llm")


def test_a_release_named_after_the_chart_keeps_its_name(repo: Path, env: dict[str, str]) -> None:
    assert (
        make(
            repo, env, "mtp-off", "RELEASE=qwen-npu-canary", "CHART=/charts/qwen-npu-0.1.0.tgz"
        ).returncode
        == 0
    )
    seen = calls(env)
    assert seen[0][2:4] == ["qwen-npu-canary", "/charts/qwen-npu-0.1.0.tgz"]
    assert seen[2][4:6] == ["status", "deployment/qwen-npu-canary-engine"]


@pytest.mark.parametrize(
    ("release", "deployment"), [("renamed", "renamed-llm-engine"), ("pinned", "serving-engine")]
)
def test_name_overrides_are_read_from_the_release(
    repo: Path, env: dict[str, str], release: str, deployment: str
) -> None:
    done = make(repo, env, "mtp-off", f"RELEASE={release}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls(env)[1:5] == wait_calls(release, deployment=deployment)


def test_leaderworkerset_engines_are_found_and_wait_on_pods(
    repo: Path, env: dict[str, str]
) -> None:
    done, seen = ran(repo, env, "mtp-off", "RELEASE=big")
    assert not any("rollout" in c for c in seen)
    assert seen[1:4] == wait_calls("big")
    assert "deprecated" not in done.stderr


def test_a_release_without_an_engine_workload_says_so(
    repo: Path, env: dict[str, str], tmp_path: Path
) -> None:
    (Path(env["HELM_MANIFEST_DIR"]) / "empty.yaml").write_text("---\nkind: ConfigMap\n")
    done = make(repo, env, "mtp-off", "RELEASE=empty")
    assert done.returncode != 0
    assert errors(done).splitlines()[-1] == (
        "mtp-off: the manifest of release empty has no engine Deployment or LeaderWorkerSet; "
        "next: make status"
    )


@pytest.mark.parametrize(
    ("current", "target", "patch", "expected"),
    [
        ({}, "patch-off", "mamba-scatter-ub-aware", ["mamba-scatter-ub-aware"]),
        (
            {"patches": {"disabled": ["mtp-modelslim-unquant"]}},
            "patch-off",
            "mamba-scatter-ub-aware",
            ["mtp-modelslim-unquant", "mamba-scatter-ub-aware"],
        ),
        (
            {"patches": {"disabled": ["mtp-modelslim-unquant"]}},
            "patch-off",
            "mtp-modelslim-unquant",
            ["mtp-modelslim-unquant"],
        ),
        (
            {"mtp": {"enabled": False}, "patches": {"disabled": [PATCHES[0], PATCHES[2]]}},
            "patch-on",
            PATCHES[0],
            [PATCHES[2]],
        ),
        ({"patches": {"disabled": []}}, "patch-on", PATCHES[1], []),
    ],
)
def test_patch_switches_edit_the_disabled_list(
    repo: Path,
    env: dict[str, str],
    tmp_path: Path,
    current: dict[str, object],
    target: str,
    patch: str,
    expected: list[str],
) -> None:
    values = tmp_path / "values.json"
    values.write_text(json.dumps(current))
    done = make(
        repo, env | {"HELM_VALUES_FILE": str(values)}, target, f"PATCH={patch}", "NAMESPACE=llm"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = calls(env)
    assert seen[0] == [
        "helm",
        "get",
        "values",
        "qwen-npu",
        "--namespace",
        "llm",
        "--output",
        "json",
    ]
    upgrade = seen[1]
    assert upgrade[:7] == helm_upgrade(namespace="llm")
    assert upgrade[7] == "--set-json" and upgrade[8].startswith("patches.disabled=")
    assert json.loads(upgrade[8].split("=", 1)[1]) == expected
    assert len(upgrade) == 9
    assert seen[2:6] == wait_calls(namespace="llm", deployment="qwen-npu-engine")
    assert printed(done)[0] == upgrade


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["patch-off"], "make patch-off: set PATCH=<name>, one of: " + " ".join(PATCHES)),
        (
            ["patch-off", "PATCH=mamba-scatter"],
            "make patch-off: unknown patch 'mamba-scatter'; PATCH must be one of: "
            + " ".join(PATCHES)
            + " (qwen_npu/patches/registry.py)",
        ),
        (
            ["patch-on", "PATCH=all"],
            "make patch-on: unknown patch 'all'; PATCH must be one of: "
            + " ".join(PATCHES)
            + " (qwen_npu/patches/registry.py)",
        ),
        (
            ["rollback", "REVISION=3a"],
            "make rollback: REVISION=3a is not a revision number; "
            "see the REVISION column of: make status",
        ),
    ],
)
def test_bad_input_is_one_line_and_touches_nothing(
    repo: Path, env: dict[str, str], args: list[str], message: str
) -> None:
    done = make(repo, env, *args)
    assert done.returncode != 0
    assert errors(done).strip() == message and done.stdout == ""
    assert calls(env) == []


def test_rollback_to_the_previous_revision_then_health(repo: Path, env: dict[str, str]) -> None:
    _, seen = ran(repo, env, "rollback")
    assert seen[0] == ["helm", "history", "qwen-npu", "--namespace", "default", "--max", "10"]
    assert seen[1] == ["helm", "rollback", "qwen-npu", "--namespace", "default"]
    assert seen[2:6] == wait_calls(deployment="qwen-npu-engine")
    exec_readyz(seen[6])


def test_rollback_to_a_revision(repo: Path, env: dict[str, str]) -> None:
    assert (
        make(repo, env, "rollback", "REVISION=7", "RELEASE=prod", "NAMESPACE=llm").returncode == 0
    )
    assert calls(env)[1] == ["helm", "rollback", "prod", "7", "--namespace", "llm"]


def test_status_shows_history_values_pods_and_sidecar_status(
    repo: Path, env: dict[str, str]
) -> None:
    _, seen = ran(repo, env, "status", "NAMESPACE=llm")
    assert seen[0] == ["helm", "history", "qwen-npu", "--namespace", "llm", "--max", "10"]
    assert seen[1] == ["helm", "get", "values", "qwen-npu", "--namespace", "llm"]
    assert seen[2] == [
        "kubectl",
        "--namespace",
        "llm",
        "get",
        "pods",
        "--selector",
        "app.kubernetes.io/instance=qwen-npu",
        "--output",
        "wide",
    ]
    assert seen[4][3:8] == ["exec", "qwen-npu-engine-7d9f-abcde", "-c", "sidecar", "--"]
    assert "http://127.0.0.1:9400/status" in seen[4][-1]


@pytest.mark.parametrize(
    ("failing", "message", "last"),
    [
        ("rollout status", "mtp-off: the rollout did not finish; next: make status", "rollout"),
        ("wait --for", "mtp-off: engine pods not Ready; next: make status", "wait"),
        ("helm upgrade", None, "upgrade"),
    ],
)
def test_a_failing_step_stops_with_the_next_step(
    repo: Path, env: dict[str, str], failing: str, message: str | None, last: str
) -> None:
    done = make(repo, env | {"ONCALL_FAIL": failing}, "mtp-off")
    assert done.returncode != 0
    assert "done, release" not in done.stdout
    if message:
        assert message in errors(done)
    assert last in calls(env)[-1]


@pytest.mark.parametrize("target", ["mtp-off", "patch-off PATCH=mtp-modelslim-unquant", "status"])
@pytest.mark.parametrize(("tool", "var"), [("helm", "HELM"), ("kubectl", "KUBECTL")])
def test_a_missing_tool_is_one_line_before_any_call(
    repo: Path, env: dict[str, str], target: str, tool: str, var: str
) -> None:
    done = make(repo, env, *target.split(), f"{var}=/nonexistent/{tool}")
    assert done.returncode != 0
    name = target.split()[0]
    assert errors(done).strip() == (
        f"make {name}: {var}=/nonexistent/{tool} is not found or not executable; "
        f"install {tool} or set {var}=/path/to/{tool} (docs/runbook.md)"
    )
    assert calls(env) == []


@pytest.mark.parametrize(
    ("target", "failing", "message"),
    [
        ("status", "helm history", "status: helm cannot read release qwen-npu in default"),
        ("status", "helm get values", "status: helm get values failed (its error is above)"),
        ("status", "kubectl --namespace default get pods", "status: kubectl cannot list pods"),
        ("status", "kubectl --namespace default exec", "status: the sidecar of"),
        ("rollback", "helm history", "rollback: helm cannot read release qwen-npu in default"),
        ("rollback", "helm rollback", "rollback: helm rollback failed (its error is above)"),
        ("mtp-on", "helm upgrade", "mtp-on: helm upgrade failed (its error is above)"),
        ("patch-on", "helm get values", "patch-on: cannot read the release's values"),
    ],
)
def test_a_failing_helm_says_what_failed_and_the_next_step(
    repo: Path, env: dict[str, str], target: str, failing: str, message: str
) -> None:
    args = [target, "PATCH=mtp-modelslim-unquant"] if target.startswith("patch") else [target]
    done = make(repo, env | {"ONCALL_FAIL": failing}, *args)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    said = errors(done).splitlines()
    # The tools' own errors may come first; the verdict is one line on stderr, the last, and it
    # names the next step.
    verdicts = [line for line in said if "; next: " in line]
    assert len(verdicts) == 1 and said[-1] == verdicts[0] and verdicts[0].startswith(message)
    assert "; next: " not in done.stdout
    assert failing in " ".join(calls(env)[-1])  # nothing ran after the failing step


def test_values_that_are_not_json_stop_patch_off_without_a_traceback(
    repo: Path, env: dict[str, str], tmp_path: Path
) -> None:
    values = tmp_path / "values.txt"
    values.write_text("Error: this is not JSON\n")
    done = make(
        repo, env | {"HELM_VALUES_FILE": str(values)}, "patch-off", "PATCH=mtp-modelslim-unquant"
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[0].startswith("helm get values did not print JSON: ")
    assert errors(done).splitlines()[-1].startswith("patch-off: cannot read the release's values")
    assert not any(c[:2] == ["helm", "upgrade"] for c in calls(env))


@pytest.mark.parametrize(
    ("release", "ref"),
    [("qwen-npu", "deployment/qwen-npu-engine"), ("big", "leaderworkerset/big-qwen-npu-engine")],
)
def test_engine_ref_prints_the_workload_for_the_runbook(
    repo: Path, env: dict[str, str], release: str, ref: str
) -> None:
    done = make(repo, env, "-s", "engine-ref", f"RELEASE={release}", "NAMESPACE=llm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ref + "\n"
    assert calls(env) == [["helm", "get", "manifest", release, "--namespace", "llm"]]
