"""The preflight init container judges what the engine will really run.

Its arguments are `preflight.npuMemoryGb`, `preflight.checkShards`, `preflight.extraArgs`, then
`--engine-args` and the engine's own rendered arguments (TP, MTP on/off, SSM dtype, memory
fraction, quantization are read from them); its environment (QWEN_NPU_CHIP,
QWEN_NPU_DISABLE_PATCHES, SGLANG_MAMBA_SSM_DTYPE) is the engine's. Checked three ways: preflight's
own argument parser reads every rendered line and must land on the engine's settings; the real
`qwen-npu preflight` runs with the rendered command, arguments and environment against a synthetic
checkpoint and must change its verdict as the values do; values that would make the two disagree
fail at render time.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

from qwen_npu.preflight import Options
from qwen_npu.preflight.cli import build_parser
from tools import chart as chart_tool
from tools.paths import REPO

UPSTREAM = chart_tool.values_from(chart_tool.PROFILES_DIR / "qwen3.6-35b-a3b-w8a8.yaml")
BIG = chart_tool.values_from(chart_tool.PROFILES_DIR / "qwen3.5-397b-a17b-w8a8.yaml")
CHECKPOINT = "Qwen3.6-35B-A3B-w8a8"

# Extra scenarios beside every profile and ci/ overlay: each preflight knob off its default.
VARIANTS: dict[str, dict[str, Any]] = {
    "checkpoint-state": chart_tool.deep_merge(UPSTREAM, {"engine": {"mambaSsmDtype": ""}}),
    "fp16-mtp-off": chart_tool.deep_merge(
        UPSTREAM, {"engine": {"mambaSsmDtype": "float16"}, "mtp": {"enabled": False}}
    ),
    "mem-0.7-32g-shards": chart_tool.deep_merge(
        UPSTREAM,
        {
            "engine": {"memFractionStatic": 0.7},
            "preflight": {"npuMemoryGb": 32, "checkShards": True, "extraArgs": ["--json"]},
        },
    ),
    "lws-bf16-patch-off": chart_tool.deep_merge(
        BIG,
        {
            "engine": {"mambaSsmDtype": "bfloat16"},
            "patches": {"disabled": ["mamba-scatter-ub-aware", "mtp-modelslim-unquant"]},
            "preflight": {"npuMemoryGb": 48.5},
        },
    ),
}


def _env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env", [])}


def _pairs(args: list[str]) -> dict[str, str]:
    return dict(itertools.pairwise(args))


def _preflight_and_engine(
    docs: list[dict[str, Any]],
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(role, preflight, engine) of every engine pod template that has a preflight container."""
    found = []
    for role, template in chart_tool.pod_templates(chart_tool.engine_workload(docs)):
        preflight = chart_tool.container(template, "preflight")
        engine = chart_tool.container(template, "engine")
        assert engine is not None
        if preflight is not None:
            found.append((role, preflight, engine))
    return found


def _assert_judges_engine(values: dict[str, Any], docs: list[dict[str, Any]]) -> int:
    """Preflight's parser reads the rendered line and lands on the engine's settings."""
    merged = chart_tool.merged_values(values)
    checked = 0
    for role, preflight, engine in _preflight_and_engine(docs):
        assert preflight["command"] == ["qwen-npu", "preflight"], role
        assert preflight["image"] == engine["image"], role
        args = build_parser().parse_args([str(a) for a in preflight["args"]])
        engine_args = [str(a) for a in engine["args"]]
        assert args.engine_args == engine_args, role  # the engine's line, as rendered
        flags = _pairs(engine_args)
        model_dir, opts = Options.from_engine_args(args.engine_args)
        assert model_dir == flags["--model-path"], role
        assert opts.tp == int(flags["--tp-size"]), role
        assert opts.mtp is ("--speculative-algorithm" in engine_args), role
        assert opts.mem_fraction_static == float(flags["--mem-fraction-static"]), role
        assert opts.mamba_ssm_dtype == flags.get("--mamba-ssm-dtype"), role
        assert opts.quantization == flags.get("--quantization"), role
        assert args.npu_memory_gb == float(merged["preflight"]["npuMemoryGb"]), role
        assert args.check_shards is merged["preflight"]["checkShards"], role
        # The environment preflight reads is the engine's, entry for entry.
        pre_env, eng_env = _env_of(preflight), _env_of(engine)
        for name in ("QWEN_NPU_CHIP", "QWEN_NPU_DISABLE_PATCHES", "SGLANG_MAMBA_SSM_DTYPE"):
            assert pre_env.get(name) == eng_env.get(name), (role, name)
        assert pre_env["QWEN_NPU_DISABLE_PATCHES"]["value"] == ",".join(
            merged["patches"]["disabled"]
        )
        assert {k: v for k, v in eng_env.items() if k in pre_env} == pre_env, role
        checked += 1
    return checked


def test_should_parse_to_engine_settings_when_rendering_every_scenario(
    rendered_scenarios: dict[str, list[dict[str, Any]]],
    scenario_values: dict[str, dict[str, Any]],
) -> None:
    checked = {
        name: _assert_judges_engine(scenario_values[name], docs)
        for name, docs in rendered_scenarios.items()
    }
    for name, values in VARIANTS.items():
        checked[name] = _assert_judges_engine(values, chart_tool.render_docs(values))
    # Every scenario has preflight except the one that turns it off; LWS: leader and worker.
    assert [name for name, n in checked.items() if n == 0] == ["ci-minimal"]
    assert checked["qwen3.5-397b-a17b-w8a8-mtp-on"] == checked["lws-bf16-patch-off"] == 2


def _preflight_args(values: dict[str, Any], role: str = "single") -> list[str]:
    docs = chart_tool.render_docs(values)
    found = {r: p for r, p, _ in _preflight_and_engine(docs)}
    return [str(a) for a in found[role]["args"]]


def test_should_equal_documented_preflight_line_when_rendering_defaults() -> None:
    text = (REPO / "docs" / "chart.md").read_text()
    marker = "<!-- documented-preflight -->"
    assert marker in text, f"docs/chart.md: the marker {marker} is missing"
    block = text.split(marker, 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    documented = shlex.split(block.replace("\\\n", " "))
    assert documented[:2] == ["qwen-npu", "preflight"]
    for values in ({}, UPSTREAM):
        assert _preflight_args(values) == documented[2:]


def test_should_take_memory_settings_from_engine_values_when_rendering() -> None:
    default = _pairs(_preflight_args({}))
    assert default["--npu-memory-gb"] == "64"
    assert default["--mem-fraction-static"] == "0.8"
    changed = _pairs(
        _preflight_args({"engine": {"memFractionStatic": 0.72}, "preflight": {"npuMemoryGb": 32}})
    )
    assert changed["--npu-memory-gb"] == "32"
    assert changed["--mem-fraction-static"] == "0.72"


def test_should_add_check_shards_only_when_opted_in() -> None:
    assert "--check-shards" not in _preflight_args({})
    assert "--check-shards" in _preflight_args({"preflight": {"checkShards": True}})
    # extraArgs still follow the chart's flags.
    args = _preflight_args({"preflight": {"checkShards": True, "extraArgs": ["--json"]}})
    assert args[: args.index("--engine-args")][-2:] == ["--check-shards", "--json"]


@pytest.mark.parametrize("values", [{}, BIG], ids=["deployment", "lws"])
def test_should_drop_init_container_when_preflight_disabled(values: dict[str, Any]) -> None:
    off = chart_tool.deep_merge(values, {"preflight": {"enabled": False}})
    docs = chart_tool.render_docs(off)
    templates = list(chart_tool.pod_templates(chart_tool.engine_workload(docs)))
    assert templates
    for role, template in templates:
        # Only the native sidecar (serving pods) stays an init container; workers have none.
        names = [c["name"] for c in template["spec"].get("initContainers", [])]
        assert names == ([] if role == "worker" else ["sidecar"]), (role, names)
    on_docs = chart_tool.render_docs(values)
    assert len(_preflight_and_engine(on_docs)) == len(templates)


BAD: dict[str, tuple[dict[str, Any], list[str]]] = {
    "preflight-no-mtp": (
        {"preflight": {"extraArgs": ["--no-mtp"]}},
        ["preflight.extraArgs", "--no-mtp", "set mtp.enabled"],
    ),
    "preflight-tp": (
        {"preflight": {"extraArgs": ["--tp-size=4"]}},
        ["preflight.extraArgs", "--tp-size", "set engine.tpSize"],
    ),
    "preflight-abbreviated": (
        {"preflight": {"extraArgs": ["--mem-frac", "0.5"]}},
        ["preflight.extraArgs", "--mem-frac (argparse reads it as --mem-fraction-static)"],
    ),
    "preflight-npu-memory": (
        {"preflight": {"extraArgs": ["--npu-memory-gb", "32"]}},
        ["preflight.extraArgs", "set preflight.npuMemoryGb"],
    ),
    "preflight-check-shards": (
        {"preflight": {"extraArgs": ["--check-shards"]}},
        ["set preflight.checkShards"],
    ),
    "engine-mem-fraction": (
        {"engine": {"extraArgs": ["--mem-fraction-static", "0.7"]}},
        ["engine.extraArgs", "--mem-fraction-static", "set engine.memFractionStatic"],
    ),
    "engine-ssm-dtype": (
        {"engine": {"extraArgs": ["--mamba-ssm-dtype=bfloat16"]}},
        ["engine.extraArgs", "set engine.mambaSsmDtype"],
    ),
    "engine-speculative": (
        {"mtp": {"enabled": False}, "engine": {"extraArgs": ["--speculative-algorithm", "NEXTN"]}},
        ["engine.extraArgs", "mtp.enabled"],
    ),
    "extra-env-patches": (
        {"engine": {"extraEnv": [{"name": "QWEN_NPU_DISABLE_PATCHES", "value": "all"}]}},
        ["engine.extraEnv sets QWEN_NPU_DISABLE_PATCHES", "set patches.disabled"],
    ),
    "ascend-env-dtype": (
        {"engine": {"ascendEnv": {"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"}}},
        ["engine.ascendEnv sets SGLANG_MAMBA_SSM_DTYPE", "set engine.mambaSsmDtype"],
    ),
    "preflight-chip": (
        {"preflight": {"extraArgs": ["--chip=a3"]}},
        ["preflight.extraArgs", "--chip", "set npu.chip"],
    ),
    "preflight-engine-args": (
        {"preflight": {"extraArgs": ["--engine-args", "--tp-size", "4"]}},
        ["preflight.extraArgs", "--engine-args"],
    ),
    "ascend-env-chip": (
        {"engine": {"ascendEnv": {"QWEN_NPU_CHIP": "a3"}}},
        ["engine.ascendEnv sets QWEN_NPU_CHIP", "set npu.chip"],
    ),
    "chip-unknown": ({"npu": {"chip": "910c"}}, ["/npu/chip"]),
    "npu-memory-zero": ({"preflight": {"npuMemoryGb": 0}}, ["/preflight/npuMemoryGb"]),
    "check-shards-string": ({"preflight": {"checkShards": "yes"}}, ["/preflight/checkShards"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_should_fail_naming_the_value_when_engine_and_preflight_could_disagree(case: str) -> None:
    values, fragments = BAD[case]
    with pytest.raises((helm.HelmRenderError, helm.HelmValuesError)) as caught:
        chart_tool.render(values)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message


def test_should_reject_a_fraction_given_with_plain_set_when_schema_wants_a_number() -> None:
    """Helm's --set types integers and booleans only: 0.7 arrives as a string (docs/chart.md)."""
    assert helm.parse_set_string("engine.memFractionStatic=0.7") == {
        "engine": {"memFractionStatic": "0.7"}
    }
    with pytest.raises(helm.HelmValuesError, match="/engine/memFractionStatic"):
        chart_tool.render(helm.parse_set_string("engine.memFractionStatic=0.7"))
    fixed = helm.parse_set_json("engine.memFractionStatic=0.7")
    assert _pairs(_preflight_args(fixed))["--mem-fraction-static"] == "0.7"


def test_should_keep_unrelated_extra_flags_when_rendering() -> None:
    values = {
        "engine": {"extraArgs": ["--max-running-requests", "64", "--tp-size-x"]},
        "preflight": {"extraArgs": ["--json"]},
    }
    docs = chart_tool.render_docs(values)
    assert chart_tool.engine_args(docs)[-3:] == ["--max-running-requests", "64", "--tp-size-x"]
    args = _preflight_args(values)
    assert args[args.index("--engine-args") - 1] == "--json"


# --- the real preflight, run as the init container would run it --------------------------------


@pytest.fixture(scope="module")
def models_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A mount path holding a synthetic Qwen3.6-35B-A3B-shaped checkpoint (fp32 SSM state, FLOAT
    MTP, real safetensors headers over sparse shards)."""
    from fixtures.checkpoints import write_checkpoint

    root = tmp_path_factory.mktemp("models")
    write_checkpoint(root / CHECKPOINT, "35B-A3B", shard_headers=True)
    return root


def run_init_container(
    models_root: Path, set_values: str = "", set_json: str = ""
) -> tuple[int, dict[str, Any]]:
    """Render with `--set <set_values> --set-json <set_json>` over the upstream profile (parsed by
    Helm's own code), then run the preflight init container's command, arguments and environment
    (value entries) here; returns (exit code, JSON report)."""
    values = chart_tool.deep_merge(
        UPSTREAM,
        {
            "model": {"mountPath": str(models_root), "path": CHECKPOINT},
            "preflight": {"extraArgs": ["--json"]},
        },
    )
    if set_values:
        values = chart_tool.deep_merge(values, helm.parse_set_string(set_values))
    if set_json:
        values = chart_tool.deep_merge(values, helm.parse_set_json(set_json))
    ((_, preflight, _),) = _preflight_and_engine(chart_tool.render_docs(values))
    env = {e["name"]: str(e["value"]) for e in preflight["env"] if "value" in e}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.run(
        [*preflight["command"], *[str(a) for a in preflight["args"]]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.stdout.strip(), proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)


def _blocking(report: dict[str, Any]) -> set[str]:
    return {f["code"] for f in report["blocking"]}


def test_should_be_ready_with_patches_when_engine_runs_defaults(models_root: Path) -> None:
    code, report = run_init_container(models_root)
    assert (code, report["verdict"]) == (0, "ready_with_patches")
    assert report["tp"]["tp"] == 2 and report["mtp"]["enabled"] is True
    assert report["chip"] == "910b" and report["model"]["mamba_ssm_dtype"] == "bfloat16"
    # bf16 state: the kernel's default h_block_size 2 fits the UB, the UB patch is not needed.
    assert report["ub_plan"]["h_block_size"] == 2
    assert "mamba-scatter-ub-aware" not in report["patches"]["needed"]
    assert report["memory"]["npu_memory_gb"] == 64.0
    assert report["memory"]["mem_fraction_static"] == 0.8
    assert report["files"]["shards_checked"] is False


def test_should_stop_the_pod_when_engine_would_run_without_a_needed_patch(
    models_root: Path,
) -> None:
    both = "patches.disabled={mtp-modelslim-unquant,modelslim-moe-unquant-fallback}"
    code, report = run_init_container(models_root, both)
    assert (code, report["verdict"]) == (1, "would_fail")
    assert "patch-disabled" in _blocking(report)
    assert report["patches"]["disabled"] == [
        "modelslim-moe-unquant-fallback",
        "mtp-modelslim-unquant",
    ]


def test_should_stop_the_pod_when_checkpoint_fp32_state_meets_910b(models_root: Path) -> None:
    """engine.mambaSsmDtype="" hands the dtype to config.json (float32): the 910B cannot."""
    code, report = run_init_container(models_root, set_json='engine.mambaSsmDtype=""')
    assert (code, _blocking(report)) == (1, {"ssm-dtype-unsupported"})
    (finding,) = report["blocking"]
    assert "chunk_gated_delta_rule" in finding["message"]
    assert "engine.mambaSsmDtype=bfloat16" in finding["message"]
    # Ascend950's prefill takes it (the verify op's limit is a warning here, the engine's start-up
    # check refuses it); the fp32 plan needs the UB patch (h_block_size 1).
    code, report = run_init_container(
        models_root,
        "npu.chip=ascend950,patches.disabled={mamba-scatter-ub-aware}",
        'engine.mambaSsmDtype=""',
    )
    assert (code, _blocking(report)) == (1, {"patch-disabled"})
    assert report["ub_plan"]["h_block_size"] == 1


def test_should_pass_when_mtp_off_makes_the_disabled_patch_unneeded(models_root: Path) -> None:
    code, report = run_init_container(
        models_root,
        "npu.chip=ascend950,patches.disabled={mamba-scatter-ub-aware},mtp.enabled=false",
        'engine.mambaSsmDtype=""',
    )
    assert (code, report["verdict"]) == (0, "ready")
    assert report["mtp"]["enabled"] is False
    assert report["memory"]["mtp_enabled"] is False


def test_should_judge_the_engine_dtype_when_engine_sets_bf16_state(models_root: Path) -> None:
    code, report = run_init_container(
        models_root, "patches.disabled={mamba-scatter-ub-aware},engine.mambaSsmDtype=bfloat16"
    )
    assert code == 0, report["blocking"]
    assert report["model"]["mamba_ssm_dtype"] == "bfloat16"
    assert report["model"]["mamba_ssm_dtype_source"] == "flag"
    assert report["ub_plan"]["h_block_size"] == 2


def test_should_stop_the_pod_when_weights_exceed_the_configured_npu_memory(
    models_root: Path,
) -> None:
    # Helm's --set keeps 0.7 a string (only integers are typed): fractions go through --set-json.
    code, report = run_init_container(
        models_root, "preflight.npuMemoryGb=16", "engine.memFractionStatic=0.7"
    )
    assert (code, report["verdict"]) == (1, "would_fail")
    assert "memory-overflow" in _blocking(report)
    assert report["memory"]["npu_memory_gb"] == 16.0
    assert report["memory"]["mem_fraction_static"] == 0.7


def test_should_read_shard_headers_when_check_shards_enabled(models_root: Path) -> None:
    code, report = run_init_container(models_root, "preflight.checkShards=true")
    assert code == 0, report["blocking"]
    assert report["files"]["shards_checked"] is True
    assert report["memory"]["source"] == "safetensors"
