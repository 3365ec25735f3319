"""templates/prometheusrule.yaml and configmap-dashboards.yaml, rendered by the real Helm SDK:
values reach the thresholds and runbook URLs of both alerts and panels; the toggles work."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_npu.observability import generate
from qwen_npu.observability.cli import main as cli_main

from .conftest import CHART, NAMESPACE, documents, rule_spec

Render = Callable[[dict[str, Any] | None], dict[str, str]]
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
BASE = VALUES["monitoring"]["runbookBaseUrl"]


def _rules(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in spec["groups"] for r in g["rules"] if "alert" in r}


def _dashboards(rendered: dict[str, str]) -> dict[str, dict[str, Any]]:
    out = {}
    for cm in documents(rendered, "configmap-dashboards.yaml"):
        ((key, text),) = cm["data"].items()
        out[key] = json.loads(text)
    return out


def _thresholds(model: dict[str, Any]) -> dict[str, list[Any]]:
    return {
        p["title"]: [s["value"] for s in p["fieldConfig"]["defaults"]["thresholds"]["steps"]]
        for p in model["panels"]
        if p["type"] != "row" and "thresholds" in p.get("fieldConfig", {}).get("defaults", {})
    }


def test_default_render_fills_every_placeholder(rendered_default: dict[str, str]) -> None:
    text = rendered_default["qwen-npu/templates/prometheusrule.yaml"]
    assert "${" not in text
    rules = _rules(rule_spec(rendered_default))
    assert set(rules) == {a for a, _ in generate.alert_exprs(generate.rules_document())}
    assert rules["QwenNpuTTFTSLOBurn"]["expr"].endswith("> 2")
    assert rules["QwenNpuQueueGrowing"]["expr"].count("> 32") == 1
    assert 'namespace="qwen"' in rules["QwenNpuChipUnhealthy"]["expr"]
    assert rules["QwenNpuStartupSlow"]["expr"].startswith(
        "(qwen_npu_engine_startup_elapsed_seconds > 1800)"
    )
    for name, rule in rules.items():
        assert rule["annotations"]["runbook_url"] == f"{BASE}#{name.lower()}"


def test_rule_metadata_and_extra_labels(render: Render) -> None:
    rendered = render({"monitoring": {"prometheusRule": {"labels": {"release": "kps"}}}})
    (rule,) = documents(rendered, "prometheusrule.yaml")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "kps"


def test_threshold_values_move_alerts_and_panels_together(render: Render) -> None:
    rendered = render(
        {
            "monitoring": {
                "prometheusRule": {"thresholds": {"ttftP99Seconds": 0.75, "hbmUsedRatioMax": 0.9}},
                "runbookBaseUrl": "https://wiki.example/runbook/",
            }
        }
    )
    rules = _rules(rule_spec(rendered))
    assert rules["QwenNpuTTFTSLOBurn"]["expr"].endswith("> 0.75")
    assert "over the SLO of 0.75 s" in rules["QwenNpuTTFTSLOBurn"]["annotations"]["description"]
    assert rules["QwenNpuHbmNearFull"]["expr"].endswith("> 0.9")
    assert rules["QwenNpuEngineDown"]["annotations"]["runbook_url"] == (
        "https://wiki.example/runbook#qwennpuenginedown"
    )
    boards = _dashboards(rendered)
    serving = _thresholds(boards["qwen-npu-serving.json"])
    engine = _thresholds(boards["qwen-npu-engine-internals.json"])
    assert serving["Time to first token"] == [None, 0.75]
    assert serving["Time per output token"] == [None, 0.1]
    assert engine["HBM used ratio"] == [None, 0.9]
    assert engine["Startup elapsed"] == [None, 1800]
    links = [
        link["url"]
        for p in boards["qwen-npu-serving.json"]["panels"]
        for link in p.get("links", [])
    ]
    assert "https://wiki.example/runbook#qwennputtftsloburn" in links


def test_dashboard_configmaps_hold_valid_json_for_the_grafana_sidecar(
    rendered_default: dict[str, str],
) -> None:
    cms = documents(rendered_default, "configmap-dashboards.yaml")
    assert len(cms) == 2
    committed = generate.dashboard_models()
    for cm in cms:
        assert cm["kind"] == "ConfigMap"
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert len(cm["metadata"]["name"]) <= 63
        ((key, text),) = cm["data"].items()
        assert "${thresholds." not in text and "${runbookBaseUrl}" not in text
        model = json.loads(text)
        assert model["uid"] == committed[key]["uid"]
        assert model["links"][0]["url"] == BASE
        for values in _thresholds(model).values():
            assert all(v is None or isinstance(v, int | float) for v in values)


@pytest.mark.parametrize(
    ("key", "template"),
    [("prometheusRule", "prometheusrule.yaml"), ("dashboards", "configmap-dashboards.yaml")],
)
def test_toggles_remove_the_objects(render: Render, key: str, template: str) -> None:
    rendered = render({"monitoring": {key: {"enabled": False}}})
    assert documents(rendered, template) == []


def test_a_missing_threshold_fails_the_render_naming_the_key(render: Render) -> None:
    from helm_python import HelmError

    with pytest.raises(HelmError, match="queueDepth"):
        render({"monitoring": {"prometheusRule": {"thresholds": {"queueDepth": None}}}})


def test_render_rules_cli_writes_what_the_chart_deploys(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("monitoring:\n  prometheusRule:\n    thresholds:\n      queueDepth: 7\n")
    out = tmp_path / "rules.yaml"
    argv = ["--render-rules", str(out), "--chart", str(CHART), "--values", str(values)]
    assert cli_main([*argv, "--namespace", "prod"]) == 0
    rules = _rules(yaml.safe_load(out.read_text()))
    assert "> 7)" in rules["QwenNpuQueueGrowing"]["expr"]
    assert 'namespace="prod"' in rules["QwenNpuHbmNearFull"]["expr"]


def test_render_rules_cli_bad_values_is_one_line(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("- just\n- a list\n")
    proc = subprocess.run(
        [
            sys.executable, "-m", "qwen_npu", "dashboards", "--render-rules",
            str(tmp_path / "r.yaml"), "--chart", str(CHART), "--values", str(values),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert str(values) in proc.stderr and "mapping" in proc.stderr
