"""docs/runbook.md against the alerts and the Makefile: one section per alert whose anchor is the
alert's runbook_url, each with what it means, how to confirm (kubectl, the sidecar's /status,
PromQL) and an action that is a real make target."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

RULES = Path("helm/qwen-npu/files/rules/qwen-npu-alerts.yaml")


def architecture_alerts(repo: Path) -> list[str]:
    text = (repo / "docs" / "architecture.md").read_text()
    section = text.split("### Alerts", 1)[1].split("\n### ", 1)[0]
    return re.findall(r"`(QwenNpu[A-Za-z]+)`", section)


def rule_alerts(repo: Path) -> dict[str, dict[str, object]]:
    """alert name -> rule, from the generated rules file of the chart."""
    data = yaml.safe_load((repo / RULES).read_text())
    return {r["alert"]: r for g in data["groups"] for r in g["rules"] if "alert" in r}


def github_anchor(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def sections(repo: Path) -> dict[str, str]:
    """Heading text -> body, for every ## and ### heading of the runbook."""
    text = (repo / "docs" / "runbook.md").read_text()
    parts = re.split(r"^#{2,3} (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def make_targets(repo: Path) -> set[str]:
    """Every target the Makefile (with mk/*.mk) defines, from make's own database."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(
        ["make", "-C", str(repo), "-pRrq", "--no-print-directory", "help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    ).stdout
    targets = set()
    for line in out.splitlines():
        match = re.match(r"^([a-zA-Z][\w-]*):(?!=)", line)
        if match:
            targets.add(match.group(1))
    return targets


@pytest.fixture(scope="module")
def alerts(repo: Path) -> list[str]:
    names = architecture_alerts(repo)
    assert len(names) == 16, names
    generated = rule_alerts(repo)
    # The generated rules and the contract list are the same set; the runbook covers both.
    assert set(generated) == set(names)
    return names


def test_every_alert_has_a_section_at_its_runbook_anchor(repo: Path, alerts: list[str]) -> None:
    found = sections(repo)
    anchors = {github_anchor(h): h for h in found}
    for alert, rule in rule_alerts(repo).items():
        url = str(rule["annotations"]["runbook_url"])  # type: ignore[index]
        anchor = url.rsplit("#", 1)[1]
        assert anchor == alert.lower()
        assert anchors.get(anchor) == alert, f"docs/runbook.md has no '### {alert}' section"
    assert {h for h in found if h.startswith("QwenNpu")} == set(alerts)


def test_each_alert_section_says_means_confirm_action(repo: Path, alerts: list[str]) -> None:
    found = sections(repo)
    for alert in alerts:
        body = found[alert]
        assert "**Means:**" in body, alert
        confirm = body.split("**Confirm:**", 1)[1].split("**Action:**", 1)[0]
        assert "kubectl " in confirm and "/status" in confirm and "PromQL" in confirm, alert
        action = body.split("**Action:**", 1)[1]
        assert re.search(r"`make [a-z-]+", action) or "make status" in action, alert


def test_every_make_command_in_the_runbook_is_a_real_target(repo: Path) -> None:
    text = (repo / "docs" / "runbook.md").read_text()
    used = set(re.findall(r"(?:`|^)make ([a-z][a-z-]*)", text, re.M))
    assert {"mtp-off", "mtp-on", "patch-off", "patch-on", "rollback", "status"} <= used
    missing = used - make_targets(repo)
    assert not missing, f"the runbook names make targets that do not exist: {sorted(missing)}"


def test_general_sections_exist(repo: Path) -> None:
    found = sections(repo)
    for heading in ("First five minutes", "Kill switches", "Rollback"):
        assert heading in found, heading
    assert "--reuse-values" in found["Kill switches"]
    assert "--reset-then-reuse-values" in found["Kill switches"]


def test_patch_names_in_the_runbook_are_the_registry(repo: Path) -> None:
    from qwen_npu.patches.registry import PATCHES

    text = (repo / "docs" / "runbook.md").read_text()
    for info in PATCHES:
        assert f"`{info.name}`" in text, info.name


def test_every_promql_metric_named_in_the_runbook_exists(repo: Path) -> None:
    """A renamed metric breaks this test, not the 3 a.m. query."""
    from qwen_npu.metrics import catalogue
    from qwen_npu.metrics import sglang as sglang_metrics

    known: set[str] = set()
    for module in (catalogue, sglang_metrics):
        for value in vars(module).values():
            items = value if isinstance(value, list | tuple) else [value]
            for item in items:
                name = getattr(item, "name", None)
                if isinstance(name, str):
                    known.add(name)
    assert len(known) > 20, "the metric lists moved: update this test"
    text = (repo / "docs" / "runbook.md").read_text()
    used = set(re.findall(r"\b((?:qwen_npu|sglang:|npu_chip_info)_?[a-z0-9_]+)", text))
    suffixes = ("_bucket", "_total", "_sum", "_count")
    for metric in used:
        if metric.startswith("npu_chip_info"):
            continue  # the NPU exporter's, not ours
        base = metric
        for suffix in suffixes:
            if base.endswith(suffix) and base not in known:
                base = base[: -len(suffix)]
        assert metric in known or base in known, f"docs/runbook.md names unknown metric {metric}"


def promql_snippets(repo: Path) -> list[str]:
    """Every backticked expression on a `PromQL:` line of the runbook and in the list under it."""
    snippets: list[str] = []
    collecting = False
    for line in (repo / "docs" / "runbook.md").read_text().splitlines():
        if line.startswith("PromQL:"):
            collecting = True
            snippets += re.findall(r"`([^`]+)`", line)
        elif collecting and line.startswith("- "):
            snippets += re.findall(r"`([^`]+)`", line)
        else:
            collecting = False
    return snippets


@pytest.mark.system
def test_every_promql_expression_parses(repo: Path, tmp_path: Path) -> None:
    """promtool parses each expression (as a recording rule): no typo reaches the pager."""
    snippets = promql_snippets(repo)
    assert len(snippets) >= 20, snippets
    rules = {
        "groups": [
            {
                "name": "runbook",
                "rules": [
                    {"record": f"runbook:expr_{i}", "expr": s} for i, s in enumerate(snippets)
                ],
            }
        ]
    }
    path = tmp_path / "runbook-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: make tools-prometheus"
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
