"""The recipe table (helm/qwen-npu/recipes.yaml) against what every profile renders.

Each profile's engine command line and environment (MTP on, the serving pod) must equal the table
entry for entry, in both directions, and every figure must name a source the table defines. The
profiles' headers name their source too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tools import chart as chart_tool

TABLE = yaml.safe_load(chart_tool.RECIPES.read_text())


def _flags(args: list[str]) -> dict[str, Any]:
    """`--flag value` / `--switch` pairs of a command line (values may start with a single dash)."""
    out: dict[str, Any] = {}
    index = 0
    while index < len(args):
        flag = args[index]
        assert flag.startswith("--"), (flag, args)
        if index + 1 < len(args) and not args[index + 1].startswith("--"):
            out[flag] = args[index + 1]
            index += 2
        else:
            out[flag] = True
            index += 1
    return out


def _env(container: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in container.get("env", []):
        if "value" in entry:
            out[entry["name"]] = str(entry["value"])
        else:
            field = entry["valueFrom"].get("fieldRef", {}).get("fieldPath")
            out[entry["name"]] = f"fieldRef:{field}"
    return out


def _expected(profile: str, part: str) -> dict[str, list[Any]]:
    entry = TABLE["profiles"][profile]
    return {**TABLE["common"][part], **entry.get(part, {})}


def _serving_engine(docs: list[dict[str, Any]]) -> dict[str, Any]:
    templates = dict(chart_tool.pod_templates(chart_tool.engine_workload(docs)))
    template = templates.get("single") or templates["leader"]
    engine = chart_tool.container(template, "engine")
    assert engine is not None
    return engine


def test_should_list_every_profile_when_reading_recipe_table() -> None:
    assert set(TABLE["profiles"]) == {p.stem for p in chart_tool.profiles()}


@pytest.mark.parametrize("profile", chart_tool.profiles(), ids=lambda p: p.stem)
def test_should_equal_recipe_table_when_rendering_profile(profile: Path) -> None:
    docs = chart_tool.render_docs(chart_tool.values_from(profile))
    engine = _serving_engine(docs)
    args = _flags([str(a) for a in engine["args"]])
    expected_args = _expected(profile.stem, "args")
    assert {flag: args.get(flag) for flag in expected_args} == {
        flag: value for flag, (value, _) in expected_args.items()
    }
    assert set(args) == set(expected_args), "flags rendered but missing from the table"
    env = _env(engine)
    expected_env = _expected(profile.stem, "env")
    assert {name: env.get(name) for name in expected_env} == {
        name: value for name, (value, _) in expected_env.items()
    }
    assert set(env) == set(expected_env), "variables rendered but missing from the table"
    absent = {
        **TABLE["common"].get("absent", {}),
        **TABLE["profiles"][profile.stem].get("absent", {}),
    }
    assert not set(absent) & (set(args) | set(env))


def test_should_name_a_defined_source_when_reading_every_figure() -> None:
    sources = set(TABLE["sources"])
    used: set[str] = set()
    for entry in [TABLE["common"], *TABLE["profiles"].values()]:
        for part in ("args", "env"):
            for name, pair in entry.get(part, {}).items():
                assert isinstance(pair, list) and len(pair) == 2, name
                used.add(pair[1])
        used |= set(entry.get("absent", {}).values())
    assert used <= sources, used - sources
    assert sources <= used, f"sources nobody cites: {sources - used}"


@pytest.mark.parametrize("profile", chart_tool.profiles(), ids=lambda p: p.stem)
def test_should_name_its_source_when_reading_profile_header(profile: Path) -> None:
    header = "\n".join(line for line in profile.read_text().splitlines() if line.startswith("#"))
    assert "Source:" in header
    assert "recipes.yaml" in header


def test_should_catch_a_drifted_figure_when_comparing_with_table() -> None:
    """The comparison is real: a profile rendered with another memory fraction differs."""
    profile = chart_tool.PROFILES_DIR / "qwen3.5-122b-a10b-w8a8.yaml"
    docs = chart_tool.render_docs(
        chart_tool.values_from(profile, extra={"engine": {"memFractionStatic": 0.8}})
    )
    args = _flags([str(a) for a in _serving_engine(docs)["args"]])
    (value, _) = _expected(profile.stem, "args")["--mem-fraction-static"]
    assert args["--mem-fraction-static"] != value
