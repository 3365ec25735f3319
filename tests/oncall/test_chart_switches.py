"""What the kill switches do to the chart, rendered with Helm's own Go SDK (helm-python-sdk).

The values change is taken from the helm command line that `make mtp-off` / `make patch-off`
really build (recording stand-in for helm), applied the way `helm upgrade --reuse-values --set`
applies it to each profile's values. The render must drop every speculative flag (or carry the
disabled patch) and keep every selector, so the upgrade and `make rollback` stay in place.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from conftest import make

from tools.paths import CHART_DIR

from .stand_ins import calls, install

# Slow: renders every profile through make; test-fast keeps the other oncall tests.
pytestmark = pytest.mark.slow

CHART = CHART_DIR
PROFILES = sorted((CHART / "profiles").glob("*.yaml"))
SELECTOR_KEYS = {"selector", "podSelector", "matchLabels", "namespaceSelector"}


@pytest.fixture(scope="module")
def chart() -> helm.Chart:
    return helm.Chart.load(CHART)


def render(chart: helm.Chart, values: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    out = chart.render(values, name="qwen-npu", namespace="llm")
    docs = [
        d
        for name in sorted(out)
        if not name.endswith("NOTES.txt")
        for d in yaml.safe_load_all(out[name])
        if d
    ]
    notes = next((text for name, text in out.items() if name.endswith("NOTES.txt")), "")
    return docs, notes


def _scalar(text: str) -> Any:
    """helm --set's typing of a value: booleans and integers, else a string."""
    if text in ("true", "false"):
        return text == "true"
    return int(text) if text.lstrip("-").isdigit() else text


def apply_helm_sets(values: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    """The user values after `helm upgrade --reuse-values` with argv's --set / --set-json."""
    out = copy.deepcopy(values)
    for flag, arg in itertools.pairwise(argv):
        if flag not in ("--set", "--set-json"):
            continue
        key, _, raw = arg.partition("=")
        value = json.loads(raw) if flag == "--set-json" else _scalar(raw)
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def recorded_upgrade(repo: Path, tmp_path: Path, values: dict[str, Any], *target: str) -> list[str]:
    env = install(tmp_path / "bin")
    current = tmp_path / "current.json"
    current.write_text(json.dumps(values))
    done = make(repo, env | {"HELM_VALUES_FILE": str(current)}, *target)
    assert done.returncode == 0, done.stdout + done.stderr
    (upgrade,) = [c for c in calls(env) if c[:2] == ["helm", "upgrade"]]
    assert "--reuse-values" in upgrade
    return upgrade


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)
    elif isinstance(node, str):
        yield node


def selectors(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """(kind/name/path) -> value of every selector-like field, plus pod template labels."""
    found: dict[str, Any] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                path = f"{where}/{key}"
                if key in SELECTOR_KEYS:
                    found[path] = value
                elif key == "template" and isinstance(value, dict):
                    found[f"{path}/labels"] = value.get("metadata", {}).get("labels")
                walk(value, path)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    for doc in docs:
        walk(doc, f"{doc['kind']}/{doc['metadata']['name']}")
    return found


def engine_env(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    envs = []
    for doc in docs:
        for text_path in ("spec.template.spec", "spec.leaderWorkerTemplate.leaderTemplate.spec"):
            node: Any = doc
            for part in text_path.split("."):
                node = node.get(part, {}) if isinstance(node, dict) else {}
            for container in node.get("containers", []) if isinstance(node, dict) else []:
                if container["name"] == "engine":
                    envs.extend(container.get("env", []))
    return envs


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_mtp_off_renders_no_speculative_flag_and_the_same_selectors(
    repo: Path, tmp_path: Path, chart: helm.Chart, profile: Path
) -> None:
    values = yaml.safe_load(profile.read_text()) or {}
    values = apply_helm_sets(values, ["--set", "mtp.enabled=true"])  # the release before
    before, _ = render(chart, values)
    assert any(s.startswith("--speculative-") for s in strings(before)), "MTP on renders no flag"

    upgrade = recorded_upgrade(repo, tmp_path, values, "mtp-off")
    after_values = apply_helm_sets(values, upgrade)
    assert after_values["mtp"]["enabled"] is False
    after, _ = render(chart, after_values)
    flags = [s for s in strings(after) if "--speculative" in s]
    assert flags == [], f"mtp-off still renders {flags}"
    assert {(d["kind"], d["metadata"]["name"]) for d in after} == {
        (d["kind"], d["metadata"]["name"]) for d in before
    }
    assert selectors(after) == selectors(before)

    # And make mtp-on brings the same flags back.
    again = apply_helm_sets(
        after_values, recorded_upgrade(repo, tmp_path / "on", after_values, "mtp-on")
    )
    back, _ = render(chart, again)
    assert sorted(s for s in strings(back) if s.startswith("--speculative-")) == sorted(
        s for s in strings(before) if s.startswith("--speculative-")
    )


def test_patch_off_renders_the_disabled_patch_and_the_same_selectors(
    repo: Path, tmp_path: Path, chart: helm.Chart
) -> None:
    values: dict[str, Any] = {"patches": {"disabled": ["mtp-modelslim-unquant"]}}
    before, _ = render(chart, values)
    upgrade = recorded_upgrade(repo, tmp_path, values, "patch-off", "PATCH=mamba-scatter-ub-aware")
    after, _ = render(chart, apply_helm_sets(values, upgrade))
    disabled = [
        e.get("value") for e in engine_env(after) if e["name"] == "QWEN_NPU_DISABLE_PATCHES"
    ]
    assert disabled and set(disabled[0].split(",")) == {
        "mtp-modelslim-unquant",
        "mamba-scatter-ub-aware",
    }
    assert selectors(after) == selectors(before)


def test_the_chart_keeps_what_a_rollback_needs(chart: helm.Chart) -> None:
    docs, notes = render(chart, {})
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert deployments and all(d["spec"].get("revisionHistoryLimit", 0) >= 1 for d in deployments)
    # No claim the chart owns: nothing immutable (volumeName, storage) stands between revisions.
    assert not [d for d in docs if d["kind"] in ("PersistentVolumeClaim", "StatefulSet")]
    assert "runbook" in notes.lower()
    for target in ("make mtp-off", "make rollback"):
        assert target in notes
