"""The simulator's config: precedence, validation, YAML and environment errors, profiles, CLI."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from pydantic import ValidationError

from qwen_npu.sim import cli
from qwen_npu.sim.config import FIELDS, ConfigError, SimConfig, build, list_profiles
from qwen_npu.sim.timing import acceptance_distribution
from tools.paths import DOCS, SIM_PROFILES


def load_yaml(path: Path) -> SimConfig:
    return build(config_file=path, env={})[0]


def bad_keys(flags: Mapping[str, object]) -> set[str]:
    """The keys a ConfigError names for ``flags`` (every problem, one line)."""
    with pytest.raises(ConfigError) as exc:
        build(flags, env={})
    msg = str(exc.value)
    assert "\n" not in msg
    return {k for k in FIELDS if re.search(rf"(?:key |\): |; ){re.escape(k)}:", msg)}


def test_defaults_are_valid_and_documented() -> None:
    cfg = SimConfig()  # constructing checks everything: the defaults pass
    assert build({}, env={})[0] == cfg
    assert cfg.model_dump(by_alias=True)["ttft-ms"] == 50.0
    assert not cfg.spec_enabled


def test_precedence_flags_over_env_over_yaml_over_defaults(tmp_path: Path) -> None:
    yml = tmp_path / "p.yaml"
    yml.write_text("ttft-ms: 11\nitl-ms: 12\nmax-running-requests: 13\nseed: 5\n")
    env = {"QWEN_NPU_SIM_ITL_MS": "22", "QWEN_NPU_SIM_MAX_RUNNING_REQUESTS": "23"}
    cfg, origin = build({"max-running-requests": 33}, config_file=yml, env=env)
    assert cfg.ttft_ms == 11  # YAML over default
    assert cfg.itl_ms == 22  # env over YAML
    assert cfg.max_running_requests == 33  # flag over env
    assert cfg.seed == 5
    assert cfg.port == 30000  # default
    assert origin["max-running-requests"] == "flag"
    assert origin["itl-ms"] == "environment"
    assert origin["ttft-ms"].startswith("config ")


def test_config_file_overrides_profile(tmp_path: Path) -> None:
    yml = tmp_path / "c.yaml"
    yml.write_text("itl-ms: 99\n")
    cfg, _ = build({}, profile="fast-test", config_file=yml, env={})
    assert cfg.itl_ms == 99
    assert cfg.ttft_ms == 20  # from the profile


def test_profile_and_config_from_env(tmp_path: Path) -> None:
    yml = tmp_path / "c.yaml"
    yml.write_text("seed: 42\n")
    env = {"QWEN_NPU_SIM_PROFILE": "fast-test", "QWEN_NPU_SIM_CONFIG": str(yml)}
    cfg, _ = build({}, env=env)
    assert (cfg.ttft_ms, cfg.seed) == (20, 42)


@pytest.mark.parametrize("name", list_profiles())
def test_every_profile_loads_and_opens_with_what_when(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no renders handed over: a chart-backed profile reads the package's own data."""
    monkeypatch.delenv("QWEN_NPU_CHART_RENDERS", raising=False)
    build({}, profile=name, env={})  # raises ConfigError when a profile is invalid
    text = (SIM_PROFILES / f"{name}.yaml").read_text()
    assert text.startswith("# What:")
    assert "# When:" in text


def test_constructing_the_config_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QWEN_NPU_SIM_TTFT_MS", "7")
    assert SimConfig().ttft_ms == 50.0  # build() is the one place that layers the sources
    cfg, _ = build({})
    assert cfg.ttft_ms == 7.0


def test_env_values_use_the_same_spelling_as_flags() -> None:
    env = {
        "QWEN_NPU_SIM_ACCEPT_DISTRIBUTION": "0.1,0.2,0.3,0.4",
        "QWEN_NPU_SIM_GARBLED": "yes",
        "QWEN_NPU_SIM_PREFILL_SERIAL": "",
        "QWEN_NPU_SIM_ACCEPT_LENGTH": "none",
        "QWEN_NPU_SIM_MODEL_PATH": "123",
    }
    cfg, origin = build({}, env=env)
    assert cfg.accept_distribution == [0.1, 0.2, 0.3, 0.4]
    assert (cfg.garbled, cfg.prefill_serial, cfg.accept_length) == (True, False, None)
    assert cfg.model_path == "123"
    assert origin["accept-distribution"] == "environment"


def test_unknown_yaml_key_names_file_key_and_suggestion(tmp_path: Path) -> None:
    yml = tmp_path / "bad.yaml"
    yml.write_text("ttft-msec: 5\n")
    with pytest.raises(ConfigError) as exc:
        load_yaml(yml)
    msg = str(exc.value)
    assert str(yml) in msg and "ttft-msec" in msg and "ttft-ms" in msg
    assert "\n" not in msg


def test_yaml_type_error_and_syntax_error(tmp_path: Path) -> None:
    yml = tmp_path / "bad.yaml"
    yml.write_text("itl-ms: fast\n")
    with pytest.raises(ConfigError, match=r"itl-ms.*not a number"):
        load_yaml(yml)
    yml.write_text("itl-ms: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(yml)
    yml.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_yaml(yml)
    with pytest.raises(ConfigError, match="file not found"):
        load_yaml(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="a folder, not a file"):
        load_yaml(tmp_path)


def test_unknown_env_key_and_bad_env_value() -> None:
    with pytest.raises(ConfigError, match=r"QWEN_NPU_SIM_TTFT.*did you mean 'ttft-ms'"):
        build({}, env={"QWEN_NPU_SIM_TTFT": "5"})
    with pytest.raises(ConfigError, match=r"QWEN_NPU_SIM_GARBLED.*true or false"):
        build({}, env={"QWEN_NPU_SIM_GARBLED": "maybe"})


def test_validation_names_each_bad_key() -> None:
    # Ranges and choices: every bad key of the layer, in one line.
    assert bad_keys({"itl-ms": 0, "error-rate": 2, "speculative-algorithm": "MEDUSA"}) == {
        "itl-ms",
        "error-rate",
        "speculative-algorithm",
    }
    # The rules between keys, once the layers are merged.
    assert bad_keys({"accept-length": 9, "accept-distribution": "0.5,0.6"}) >= {
        "accept-length",
        "accept-distribution",
    }
    with pytest.raises(ConfigError, match="itl-ms"):
        build({"itl-ms": -1.0}, env={})
    with pytest.raises(ValidationError):
        SimConfig(itl_ms=0)  # the model itself refuses it too


@pytest.mark.parametrize(
    "key,value", [("accept-length", 2.0), ("accept-rate", 0.7), ("accept-distribution", "0.5,0.5")]
)
def test_acceptance_keys_imply_nextn(key: str, value: object) -> None:
    flags = {key: value}
    if key == "accept-distribution":
        flags["speculative-num-steps"] = 1
    cfg, origin = build(flags, env={})
    assert cfg.speculative_algorithm == "NEXTN"
    assert "implied" in origin["speculative-algorithm"]
    cfg, _ = build({**flags, "speculative-algorithm": "none"}, env={})
    assert not cfg.spec_enabled  # an explicit "none" stays off


def test_new_pricing_keys_are_checked() -> None:
    flags = {"step-fixed-ms": -1, "step-ms-per-token": -2, "accept-rate": 1.5, "accept-decay": 2}
    assert bad_keys(flags) == {"step-fixed-ms", "step-ms-per-token", "accept-rate", "accept-decay"}
    # A step must take time: 0 + 0 is refused by the rule between the two keys.
    assert bad_keys({"step-fixed-ms": 0, "step-ms-per-token": 0}) == {"step-fixed-ms"}


@pytest.mark.parametrize("target", [1.0, 1.7, 2.5, 3.4, 4.0])
def test_acceptance_distribution_has_the_configured_mean(target: float) -> None:
    cfg = SimConfig(speculative_algorithm="NEXTN", speculative_num_steps=3, accept_length=target)
    dist = acceptance_distribution(cfg)
    assert len(dist) == 4
    assert abs(sum(dist) - 1) < 1e-9
    assert abs(sum((k + 1) * p for k, p in enumerate(dist)) - target) < 1e-6


def test_explicit_distribution_wins() -> None:
    cfg = SimConfig(
        speculative_algorithm="NEXTN", accept_length=3.0, accept_distribution=[0.1, 0.2, 0.3, 0.4]
    )
    assert acceptance_distribution(cfg) == [0.1, 0.2, 0.3, 0.4]


def test_cli_flags_are_the_given_ones_and_build_types_them() -> None:
    _, flags = cli.parse(["--ttft-ms", "7", "--garbled", "--accept-distribution", "0.5,0.5"])
    assert flags == {"ttft-ms": 7.0, "garbled": "true", "accept-distribution": "0.5,0.5"}
    cfg, origin = build({**flags, "speculative-num-steps": 1}, env={})
    assert (cfg.ttft_ms, cfg.garbled, cfg.accept_distribution) == (7.0, True, [0.5, 0.5])
    assert origin["garbled"] == "flag"


def _run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qwen_npu", "sim", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    yml = tmp_path / "bad.yaml"
    yml.write_text("error-rate: 3\n")
    proc = _run_cli("--config", str(yml))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "error-rate" in lines[0] and "Traceback" not in proc.stderr
    proc = _run_cli("--profile", "nope")
    assert proc.returncode == 2 and "fast-test" in proc.stderr


def test_cli_print_config_and_list_profiles() -> None:
    proc = _run_cli("--profile", "fast-test", "--itl-ms", "3", "--print-config")
    assert proc.returncode == 0, proc.stderr
    assert '"itl-ms": 3.0' in proc.stdout and '"ttft-ms": 20.0' in proc.stdout
    proc = _run_cli("--list-profiles")
    assert "qwen3.6-35b-a3b-910b-tp2-mtp" in proc.stdout.split()


def test_docs_give_the_env_rule_and_send_to_help_for_the_keys() -> None:
    # The table of keys is --help's (the next test); the page keeps the rule and the precedence.
    doc = " ".join((DOCS / "simulator.md").read_text().split())
    assert "flags > environment (`QWEN_NPU_SIM_*`) > YAML > defaults" in doc
    assert "`qwen-npu sim --help` is the table of keys" in doc


def test_help_lists_every_field_with_its_default() -> None:
    text = " ".join(cli._parser().format_help().split())
    for key, f in FIELDS.items():
        assert f"--{key} " in text, key
        assert f"(default: {cli._shown(f.default)})" in text, key


def test_uvicorn_protocol_stamps_arrival_and_prefers_httptools() -> None:
    import importlib.util

    from qwen_npu.sim.fastpath import stamped_protocol

    proto = stamped_protocol()
    base = proto.__mro__[1].__name__
    want = "HttpToolsProtocol" if importlib.util.find_spec("httptools") else "H11Protocol"
    assert base == want
    assert "data_received" in proto.__dict__


def test_a_port_in_use_is_one_line_before_any_ready_log(busy_port: int) -> None:
    port = busy_port
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "qwen_npu",
            "sim",
            "--port",
            str(port),
            "--profile",
            "fast-test",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "event=ready" not in done.stderr and "event=listening" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "level=ERROR" in line]
    assert len(errors) == 1
    assert f"port={port}" in errors[0] and "pick a free --port" in errors[0]


def test_an_unknown_profile_lists_the_known_ones_and_points_files_to_config(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["--profile", "nosuch"]) == 2
    known = ", ".join(list_profiles())
    assert capsys.readouterr().err == (
        f"qwen-npu sim: error: profile 'nosuch': not found; use one of: {known}\n"
    )
    assert cli.main(["--profile", "./mine.yaml"]) == 2
    assert capsys.readouterr().err == (
        f"qwen-npu sim: error: profile './mine.yaml': not found; use one of: {known}; "
        "a YAML file of your own goes to --config\n"
    )


def _rendered_for(yml: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart's renders for the packaged profiles and ``yml`` (what `make sim-renders` does)."""
    from tools.chart import sim_renders

    out = yml.with_name(f"renders-{len(list(yml.parent.glob('renders-*')))}.json")
    monkeypatch.setenv("QWEN_NPU_CHART_RENDERS", str(sim_renders.write(out, [yml])))


def test_a_profile_takes_its_engine_from_the_charts_render(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """chart-profile: the served model name, TP and MTP come from the chart's render of that
    profile; chart-values on top change them there, not in the simulator profile."""
    from tools import chart as chart_tool

    yml = tmp_path / "engine.yaml"
    yml.write_text(
        "chart-profile: qwen3.5-122b-a10b-w8a8\n"
        "chart-values: {mtp: {numSteps: 2, numDraftTokens: 3}}\nitl-ms: 7\n"
    )
    _rendered_for(yml, monkeypatch)
    cfg, origin = build({}, config_file=yml, env={})
    values = chart_tool.values_from(
        chart_tool.PROFILES_DIR / "qwen3.5-122b-a10b-w8a8.yaml",
        extra={"mtp": {"numSteps": 2, "numDraftTokens": 3}},
    )
    args = chart_tool.engine_args(chart_tool.render_docs(values))
    flag = dict(itertools.pairwise(args))
    assert cfg.served_model_name == flag["--served-model-name"]
    assert cfg.tp_size == int(flag["--tp-size"])
    assert (cfg.speculative_num_steps, cfg.speculative_num_draft_tokens) == (2, 3)
    assert cfg.speculative_algorithm == flag["--speculative-algorithm"] and cfg.itl_ms == 7
    assert origin["tp-size"].startswith("config ")
    yml.write_text("chart-profile: qwen3.5-122b-a10b-w8a8\nchart-values: {mtp: {enabled: false}}\n")
    _rendered_for(yml, monkeypatch)
    assert build({}, config_file=yml, env={})[0].speculative_algorithm == "none"


def test_a_chart_profile_fact_restated_or_unknown_is_one_line(tmp_path: Path) -> None:
    yml = tmp_path / "engine.yaml"
    yml.write_text("chart-profile: qwen3.6-35b-a3b-w8a8\ntp-size: 4\n")
    with pytest.raises(ConfigError, match=r"tp-size come from chart-profile .*drop them here"):
        load_yaml(yml)
    yml.write_text("chart-profile: qwen3.6-35b-a3b-w8a8\nchart-values: {mtp: {numSteps: 5}}\n")
    with pytest.raises(ConfigError, match=r"not in .*make sim-renders"):
        load_yaml(yml)
    yml.write_text("chart-profile: qwen9-tiny\n")
    with pytest.raises(ConfigError, match=r"chart-profile 'qwen9-tiny': .*use one of: .*qwen3\.6"):
        load_yaml(yml)
