"""The generator: committed files are current, alerts follow the conventions, dashboards carry
units/descriptions/thresholds/runbook links, and every metric read is declared somewhere."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from qwen_npu.metrics import catalogue
from qwen_npu.metrics import sglang as sglang_metrics
from qwen_npu.observability import alerts, config, generate
from qwen_npu.observability.alerts import Alert, AlertDefinitionError, AlertGroup, render_groups
from qwen_npu.observability.cli import main as cli_main
from qwen_npu.observability.generate import metric_names

from .conftest import CHART, REPO


def _contract_alerts() -> set[str]:
    """The alert names docs/architecture.md states as the contract ("### Alerts")."""
    page = (REPO / "docs" / "architecture.md").read_text()
    section = re.search(r"^### Alerts.*?\n(.*?)(?=^#|\Z)", page, re.S | re.M)
    assert section, "docs/architecture.md: no '### Alerts' section"
    return set(re.findall(r"`(QwenNpu\w+)`", section.group(1)))


CONTRACT_ALERTS = _contract_alerts()


def test_committed_files_are_current() -> None:
    stale = generate.stale(CHART / "files", generate.render_files())
    assert not stale, f"stale generated files {stale}: run `make dashboards`"


def test_check_flags_a_stale_file_and_write_fixes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "files"
    out.mkdir()
    assert cli_main(["--out", str(out)]) == 0
    assert cli_main(["--out", str(out), "--check"]) == 0
    rules = out / generate.RULES_FILE
    rules.write_text(rules.read_text().replace("for: 2m", "for: 20m", 1))
    (out / "dashboards" / "old.json").write_text("{}")
    capsys.readouterr()
    assert cli_main(["--out", str(out), "--check"]) == 1
    report = capsys.readouterr().err
    assert (
        "level=ERROR event=stale" in report
        and "qwen-npu-alerts.yaml" in report
        and "old.json" in report
    )


def test_cli_bad_out_is_one_line_without_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "qwen_npu", "dashboards", "--out", str(tmp_path / "no" / "files")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "--out" in proc.stderr


def test_alert_names_are_the_contract() -> None:
    assert {a.name for a in alerts.all_alerts()} == CONTRACT_ALERTS


def test_every_alert_follows_the_conventions() -> None:
    doc = generate.rules_document()
    for group in doc["groups"]:
        for rule in (r for r in group["rules"] if "alert" in r):
            name = rule["alert"]
            assert re.fullmatch(r"QwenNpu[A-Z][A-Za-z]+", name)
            assert rule["labels"] == {"severity": rule["labels"]["severity"]}
            assert rule["labels"]["severity"] in ("warning", "critical")
            assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}
            assert "{{" not in rule["annotations"]["summary"], f"{name}: summary is static"
            assert "$labels" in rule["annotations"]["description"], f"{name}: templated"
            assert rule["annotations"]["runbook_url"] == (
                f"{config.RUNBOOK_BASE_PLACEHOLDER}#{name.lower()}"
            )
            assert re.fullmatch(r"\d+[smh]", rule["for"])


def test_runbook_url_comes_from_the_pattern() -> None:
    cfg = dataclasses.replace(
        config.DEFAULT, runbook_url_pattern="{base}/{anchor}.md", runbook_base="https://x/rb"
    )
    doc = render_groups(alerts.GROUPS, cfg)
    urls = {
        r["annotations"]["runbook_url"] for g in doc["groups"] for r in g["rules"] if "alert" in r
    }
    assert "https://x/rb/qwennpuhbmnearfull.md" in urls and len(urls) == len(CONTRACT_ALERTS)


def test_alert_using_an_undeclared_threshold_is_refused() -> None:
    bad = Alert("QwenNpuX", "warning", "1m", "s", "d {{ $labels.pod }}", "x > %(queueDepth)s")
    with pytest.raises(AlertDefinitionError, match="does not declare it"):
        render_groups((AlertGroup("g", (bad,)),), config.DEFAULT)


def test_alert_needing_a_threshold_the_config_lacks_is_refused() -> None:
    bad = Alert("QwenNpuX", "warning", "1m", "s", "d", "x > %(nope)s", needs=("nope",))
    with pytest.raises(AlertDefinitionError, match="needs threshold"):
        render_groups((AlertGroup("g", (bad,)),), config.DEFAULT)


def test_thresholds_reach_the_rules_only_as_placeholders() -> None:
    text = generate.render_files()[generate.RULES_FILE]
    used = set(re.findall(r"\$\{thresholds\.(\w+)\}", text))
    assert used == set(config.DEFAULT.thresholds)
    declared = {k for a in alerts.all_alerts() for k in a.needs}
    assert declared == set(config.DEFAULT.thresholds)


def test_threshold_defaults_come_from_the_chart_values(tmp_path: Path) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["monitoring"]["prometheusRule"]["thresholds"]["queueDepth"] = 7
    changed = tmp_path / "values.yaml"
    changed.write_text(yaml.safe_dump(values))
    assert config.chart_threshold_defaults(changed)["queueDepth"] == 7.0
    # 0 (the default) follows the chart's one startup budget ("qwen-npu.startupAlertSeconds").
    budget = float(values["engine"]["startupBudgetSeconds"])
    assert config.DEFAULT.thresholds["startupBudgetSeconds"] == budget
    with pytest.raises(RuntimeError, match="thresholds"):
        config.chart_threshold_defaults(tmp_path / "missing.yaml")


def _declared_series() -> set[str]:
    return set(generate.known_series())


def test_every_metric_read_is_declared() -> None:
    files = generate.render_files()
    declared = _declared_series()
    seen: set[str] = set()
    for rel, text in files.items():
        if rel.endswith(".json"):
            for _title, expr in generate.dashboard_queries(json.loads(text)):
                seen |= metric_names(expr)
            for _var, selector, _label in generate.variable_selectors(json.loads(text)):
                seen |= metric_names(selector)
    document = generate.rules_document()
    for _name, expr in generate.alert_exprs(document) + generate.recording_exprs(document):
        seen |= metric_names(expr)
    assert seen <= declared, sorted(seen - declared)
    # The dashboards read the engine's and the sidecar's lists (and our recorded series), not a
    # handful of names.
    assert len({n for n in seen if n.startswith("sglang:")}) >= 15
    assert len({n for n in seen if n.startswith("qwen_npu")}) >= 25


def test_unknown_metric_fails_generation() -> None:
    with pytest.raises(generate.UnknownMetricError, match="sglang:num_queue_requests"):
        generate.check_metric_names([("panel", "max(sglang:num_queue_requests)")])


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'histogram_quantile(0.99, sum by (le, pod) (rate(sglang:ttft_bucket{pod=~"$pod"}'
            "[$__rate_interval])))",
            {"sglang:ttft_bucket"},
        ),
        (
            '(a_total{x="by (y)"} > ${thresholds.queueDepth}) and on (instance, job) b == 0',
            {"a_total", "b"},
        ),
        ('time() - c_seconds{pod=~"$pod"} > 1e3', {"c_seconds"}),
        ("max without (tp_rank) (deriv(q[10m])) / ignoring (source) u", {"q", "u"}),
    ],
)
def test_promql_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def _dashboards() -> dict[str, dict[str, object]]:
    return generate.dashboard_models()


def test_dashboards_have_stable_distinct_uids_and_shared_defaults() -> None:
    models = _dashboards()
    uids = {m["uid"] for m in models.values()}
    assert len(uids) == len(models)
    again = _dashboards()
    for name, model in models.items():
        assert again[name]["uid"] == model["uid"]
        assert 8 <= len(str(model["uid"])) <= 40
        assert model["tags"] == ["qwen-npu"] and model["refresh"] == "30s"
        assert model["timezone"] == "utc"
        links = model["links"]
        assert isinstance(links, list) and links[0]["url"] == config.RUNBOOK_BASE_PLACEHOLDER
    assert set(models) == {"qwen-npu-serving.json", "qwen-npu-engine-internals.json"}


def test_panels_carry_units_descriptions_thresholds_and_runbook_links() -> None:
    linked: set[str] = set()
    for name, model in _dashboards().items():
        panels = [p for p in model["panels"] if p["type"] != "row"]  # type: ignore[attr-defined]
        assert len(panels) >= 12, name
        ids = [p["id"] for p in model["panels"]]  # type: ignore[attr-defined]
        assert len(set(ids)) == len(ids)
        for p in panels:
            assert p["description"], p["title"]
            assert p["targets"], p["title"]
            if p["type"] != "table":
                assert p["fieldConfig"]["defaults"].get("unit"), p["title"]
            steps = p.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {})
            placeholders = [
                s["value"] for s in steps.get("steps", []) if isinstance(s.get("value"), str)
            ]
            for link in p.get("links", []):
                anchor = link["url"].split("#", 1)[1]
                assert link["url"].startswith(config.RUNBOOK_BASE_PLACEHOLDER + "#")
                linked.add(anchor)
            for ph in placeholders:
                key = ph.removeprefix("${thresholds.").removesuffix("}")
                # The panel that draws a threshold links to the alert that uses it.
                users = {a.name.lower() for a in alerts.all_alerts() if key in a.needs}
                assert users & {link["url"].split("#", 1)[1] for link in p.get("links", [])}, p[
                    "title"
                ]
    assert linked == {n.lower() for n in CONTRACT_ALERTS}


def test_dashboards_cover_the_issue_list() -> None:
    titles = {
        p["title"]
        for m in _dashboards().values()
        for p in m["panels"]  # type: ignore[attr-defined]
    }
    for needed in (
        "Request rate",
        "Aborted requests",
        "Time to first token",
        "Time per output token",
        "Inter-token latency",
        "End-to-end latency",
        "Queued requests",
        "Running requests",
        "KV and mamba cache usage",
        "Token throughput",
        "Acceptance length",
        "Acceptance rate",
        "Canary degeneration score",
        "Patch states",
        "h_block_size: engine vs predicted",
        "UB headroom",
        "Engine up, ready, draining",
        "NPU utilization",
        "HBM used ratio",
        "Chip temperature",
        "Chip power",
        "Chip health",
    ):
        assert needed in titles


def test_metric_lists_are_the_real_ones() -> None:
    """The generator reads the engine's and sidecar's own lists, not private copies."""
    known = generate.known_series()
    assert known["qwen_npu_engine_up"] == "qwen_npu/metrics/catalogue.py"
    assert known["sglang:num_queue_reqs"] == "qwen_npu/metrics/sglang.py"
    assert len(catalogue.CATALOGUE) + len(sglang_metrics.SGLANG_METRICS) > 40
    assert (REPO / "qwen_npu" / "metrics" / "catalogue.py").is_file()


def _github_slug(heading: str) -> str:
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_every_runbook_url_lands_on_a_runbook_section() -> None:
    """runbook_url anchors (lowercased alert names) are headings of docs/runbook.md."""
    text = (REPO / "docs" / "runbook.md").read_text()
    anchors = {_github_slug(h) for h in re.findall(r"^#{1,6}\s+(.+)$", text, flags=re.MULTILINE)}
    missing = sorted(n.lower() for n in CONTRACT_ALERTS if n.lower() not in anchors)
    assert not missing, f"docs/runbook.md lacks sections for {missing}"


def test_every_recording_follows_the_conventions() -> None:
    doc = generate.rules_document()
    records = [r for g in doc["groups"] for r in g["rules"] if "record" in r]
    assert {r["record"] for r in records} == {r.record for r in alerts.all_recordings()}
    for rule in records:
        # level:metric:operations (Prometheus' naming of recorded series), nothing but the two keys.
        assert re.fullmatch(r"qwen_npu:[a-z_]+:[a-z0-9_]+", rule["record"]), rule["record"]
        assert set(rule) == {"record", "expr"}


def test_speculative_acceptance_is_defined_once() -> None:
    """Only the recording rule divides by verify calls; the panels and the alert read it."""
    from qwen_npu.observability.alerts import SPEC_ACCEPT_LENGTH

    document = generate.rules_document()
    readers = [(f"alert {a}", e) for a, e in generate.alert_exprs(document)]
    readers += [(f"recording {r}", e) for r, e in generate.recording_exprs(document)]
    for filename, model in generate.dashboard_models().items():
        readers += [(f"{filename} {t!r}", e) for t, e in generate.dashboard_queries(model)]
    computing = [w for w, e in readers if "sglang:spec_verify_calls_total" in metric_names(e)]
    assert computing == [f"recording {SPEC_ACCEPT_LENGTH.record}"]
    reading = {w for w, e in readers if SPEC_ACCEPT_LENGTH.record in metric_names(e)}
    assert "alert QwenNpuSpecAcceptanceCollapse" in reading
    assert any("'Acceptance length'" in w for w in reading), reading
