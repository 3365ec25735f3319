"""fetch's closing preflight judges the engine the chart deploys (issue 40 item 2).

A Qwen3.5/3.6 config says ``mamba_ssm_dtype: float32`` and the chart renders
``--mamba-ssm-dtype bfloat16``: a verified download of such a checkpoint must end ready, with the
35B profile and without one (the chart's default), and the verdict must say which dtype it judged.
qwen_npu.fetch.profile reads the chart's values, a copy of the template's reading: the last test
holds it equal to preflight's reading of the rendered preflight init container, for every profile.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from fixtures.checkpoints import write_checkpoint
from fixtures.hubserver import Hub, Repo
from qwen_npu.fetch.profile import CHART_DEFAULT_SSM_DTYPE, profile_options
from qwen_npu.hardware import chips
from qwen_npu.preflight import Options
from tests.fetch.conftest import RunFetch, error_line
from tools import chart as chart_tool

PROFILE_35B = chart_tool.PROFILES_DIR / "qwen3.6-35b-a3b-w8a8.yaml"
JUDGED = ("tp", "mtp", "mamba_ssm_dtype", "mem_fraction_static", "chip", "npu_memory_gb",
          "num_draft_tokens", "draft_quantization", "quantization")  # fmt: skip


def _seed_shaped(tmp_path: Path) -> dict[str, bytes]:
    """A 35B-A3B checkpoint as the hub ships it: float32 SSM state in its config.json."""
    ckpt = write_checkpoint(tmp_path / "src", "35B-A3B")
    assert '"mamba_ssm_dtype": "float32"' in (ckpt / "config.json").read_text()
    return {str(p.relative_to(ckpt)): p.read_bytes() for p in ckpt.rglob("*") if p.is_file()}


def _fetch(tmp_path: Path, run_fetch: RunFetch, monkeypatch: pytest.MonkeyPatch, *flags: str):  # type: ignore[no-untyped-def]
    with Hub({"Qwen/Qwen3.6-35B-A3B-w8a8": Repo(_seed_shaped(tmp_path))}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        code, _, err = run_fetch(
            "hf://Qwen/Qwen3.6-35B-A3B-w8a8", str(tmp_path / "m"), *flags, fast=False
        )
    line = next((line for line in err.splitlines() if "event=preflight" in line), "")
    return code, line, err


def test_should_pass_a_seed_shaped_checkpoint_with_the_35b_profile(
    tmp_path: Path, run_fetch: RunFetch, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, line, err = _fetch(tmp_path, run_fetch, monkeypatch, "--profile", str(PROFILE_35B))
    assert code == 0, err
    assert "verdict=ready" in line and "tp=2" in line, line
    assert f"ssm_dtype={CHART_DEFAULT_SSM_DTYPE}" in line and "mtp=True" in line, line
    assert "qwen3.6-35b-a3b-w8a8.yaml" in line


def test_should_judge_the_charts_default_engine_without_a_profile(
    tmp_path: Path, run_fetch: RunFetch, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, line, err = _fetch(tmp_path, run_fetch, monkeypatch, "--tp", "2")
    assert code == 0, err
    assert "verdict=ready" in line and f"ssm_dtype={CHART_DEFAULT_SSM_DTYPE}" in line, line
    assert 'judged="the chart\'s default engine"' in line or "default engine" in line


def test_should_refuse_a_float32_state_when_the_profile_keeps_the_checkpoints(
    tmp_path: Path, run_fetch: RunFetch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not vacuous: a profile rendering no --mamba-ssm-dtype is judged on the config's float32."""
    chart = tmp_path / "chart"
    (chart / "profiles").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("name: x\n")
    (chart / "values.yaml").write_text((chart_tool.PROFILES_DIR.parent / "values.yaml").read_text())
    mine = chart / "profiles" / "mine.yaml"
    values = chart_tool.values_from(PROFILE_35B, extra={"engine": {"mambaSsmDtype": ""}})
    mine.write_text(yaml.safe_dump(values))
    code, line, _ = _fetch(tmp_path, run_fetch, monkeypatch, "--profile", str(mine))
    assert code == 1 and "verdict=would_fail" in line and 'ssm_dtype="the checkpoint\'s"' in line


@pytest.mark.parametrize(
    ("text", "says"),
    [("engine: [tpSize: 2\n", "not valid YAML at line"), ("- 1\n", "not a list"),
     ("engine:\n  tpSize: two\n", "engine.tpSize is 'two'")],
)  # fmt: skip
def test_should_refuse_a_bad_profile_in_one_line_naming_it(
    tmp_path: Path, run_fetch: RunFetch, text: str, says: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    code, _, err = run_fetch("hf://org/model", str(tmp_path / "m"), "--profile", str(bad))
    assert code == 2
    line = error_line(err)
    assert f"--profile {bad}" in line and says in line, line


def _rendered_preflight(values: dict[str, Any]) -> Options:
    docs = chart_tool.render_docs(values)
    template = next(iter(chart_tool.pod_templates(chart_tool.engine_workload(docs))))[1]
    container = chart_tool.container(template, "preflight")
    assert container is not None
    args = [str(a) for a in container["args"]]
    own, engine = args[: args.index("--engine-args")], args[args.index("--engine-args") + 1 :]
    env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
    _, opts = Options.from_engine_args(
        engine,
        chip=chips.chip_from_env(env),
        npu_memory_gb=float(dict(itertools.pairwise(own))["--npu-memory-gb"]),
    )
    return opts


@pytest.mark.parametrize("profile", chart_tool.profiles(), ids=lambda p: p.stem)
def test_should_read_what_the_chart_renders_for_every_profile(profile: Path) -> None:
    ours = profile_options(profile)
    rendered = _rendered_preflight(chart_tool.values_from(profile))
    assert {k: getattr(ours, k) for k in JUDGED} == {k: getattr(rendered, k) for k in JUDGED}


def test_should_take_the_charts_default_ssm_dtype_from_its_default_render() -> None:
    assert _rendered_preflight({}).mamba_ssm_dtype == CHART_DEFAULT_SSM_DTYPE
