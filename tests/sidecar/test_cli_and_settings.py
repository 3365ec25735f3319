"""Settings (flags over environment over defaults), one-line errors, and the real server process."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from qwen_npu import processes
from qwen_npu.processes import free_port
from qwen_npu.sidecar import cli
from qwen_npu.sidecar.config import SettingsError, load_settings
from qwen_npu.sim.testing import running_sim
from tools.paths import REPO


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for key in list(os.environ):
        if key.startswith("QWEN_NPU_"):
            monkeypatch.delenv(key)
    yield monkeypatch


def test_defaults_match_the_contract(clean_env: pytest.MonkeyPatch) -> None:
    s = load_settings()
    assert (s.engine_url, s.sidecar_port, s.canary_interval_s) == (
        "http://127.0.0.1:30000",
        9400,
        60,
    )
    assert (s.startup_budget_s, s.liveness_failures, s.tp_size) == (1800, 3, 1)
    assert s.state_dir is None and s.model_dir is None and s.canary_enabled


def test_flags_win_over_environment(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("QWEN_NPU_ENGINE_URL", "http://10.0.0.1:30000/")
    clean_env.setenv("QWEN_NPU_TP_SIZE", "4")
    clean_env.setenv("QWEN_NPU_CANARY_INTERVAL_S", "0")
    clean_env.setenv("QWEN_NPU_STATE_DIR", str(tmp_path))
    s = load_settings(tp_size="2")
    assert s.engine_url == "http://10.0.0.1:30000"  # trailing slash dropped
    assert s.tp_size == 2 and s.state_dir == tmp_path and not s.canary_enabled


@pytest.mark.parametrize(
    ("env", "argv", "fragment"),
    [
        ({}, ["--tp-size", "two"], "argument --tp-size: 'two' is not an integer"),
        ({}, ["--port", "70000"], "argument --sidecar-port/--port: 70000 is not"),
        ({"QWEN_NPU_TP_SIZE": "two"}, [], "QWEN_NPU_TP_SIZE / --tp-size = 'two'"),
        ({"QWEN_NPU_SIDECAR_PORT": "70000"}, [], "QWEN_NPU_SIDECAR_PORT / --port"),
        ({"QWEN_NPU_ENGINE_URL": "localhost:30000"}, [], "QWEN_NPU_ENGINE_URL / --engine-url"),
        ({"QWEN_NPU_CANARY_INTERVAL_S": "-5"}, [], "QWEN_NPU_CANARY_INTERVAL_S = '-5'"),
        ({"QWEN_NPU_MAMBA_SSM_DTYPE": "fp8"}, [], "QWEN_NPU_MAMBA_SSM_DTYPE"),
        ({"QWEN_NPU_CANARY_GOLDEN_FILE": "/nonexistent/golden"}, [], "cannot read the file"),
        (
            {"QWEN_NPU_ENGINE_API_KEY": "a", "QWEN_NPU_ENGINE_API_KEY_FILE": "/x"},
            [],
            "set only one of them",
        ),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(
    clean_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    argv: list[str],
    fragment: str,
) -> None:
    for key, value in env.items():
        clean_env.setenv(key, value)
    try:
        code = cli.main([*argv, "--check"])
    except SystemExit as exc:  # the parser's refusal of a flag
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert err.count("\n") == 1 and err.startswith("qwen-npu sidecar: error: ")
    assert "Traceback" not in err


def test_check_prints_the_effective_settings_without_secrets(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.setenv("QWEN_NPU_ENGINE_API_KEY", "hunter2")
    assert cli.main(["--check", "--port", "9555"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sidecar_port"] == 9555 and out["engine_api_key"] == "***"


def test_settings_error_type() -> None:
    with pytest.raises(SettingsError):
        load_settings(liveness_failures=0)


@pytest.mark.system
def test_the_real_server_process(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """``qwen-npu sidecar`` as the pod runs it: read-only friendly, JSON logs, clean stop."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run make tools"
    log = tmp_path_factory.mktemp("sidecar-log") / "sidecar.log"
    with running_sim(health_check_poll_s=0.05, ttft_ms=1, itl_ms=1) as sim:
        port = free_port()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("QWEN_NPU_")},
            "QWEN_NPU_POLL_INTERVAL_S": "0.1",
            "QWEN_NPU_CANARY_INTERVAL_S": "0.2",
            "HOME": str(tmp_path),  # nothing may be written anywhere: cwd and HOME are read-only
        }
        os.chmod(tmp_path, 0o555)
        cmd = [sys.executable, "-m", "qwen_npu", "sidecar", "--host", "127.0.0.1",
               "--port", str(port), "--engine-url", sim]  # fmt: skip
        proc = processes.start(cmd, log=log, env=env, replace_env=True, cwd=tmp_path)
        try:
            base = f"http://127.0.0.1:{port}"
            processes.wait_http(base + "/readyz", what="sidecar ready", proc=proc, log=log)
            page = httpx.get(base + "/metrics", timeout=5).text
            assert "_created" not in page  # the process disables the *_created series
            check = subprocess.run(
                [promtool, "check", "metrics"], input=page, capture_output=True, text=True,
                timeout=30,
            )  # fmt: skip
            assert check.returncode == 0, check.stdout + check.stderr
        finally:
            returncode = processes.stop(proc)
            os.chmod(tmp_path, 0o755)
    err = log.read_text()
    # uvicorn stops gracefully, then re-raises SIGTERM: the pod sees 143, as for any process.
    assert returncode in (0, -signal.SIGTERM), err
    # The shared shape (qwen_npu/log.py): `qwen_npu.sidecar level=... event=... k=v ... next=...`.
    ours = [line for line in err.splitlines() if line.startswith("qwen_npu.sidecar ")]
    events = [dict(w.split("=", 1) for w in shlex.split(line)[1:]) for line in ours]
    names = [e["event"] for e in events]
    assert "sidecar_start" in names and "engine_ready" in names and "sidecar_stop" in names
    assert all(e["level"] in ("DEBUG", "INFO", "WARNING", "ERROR") for e in events)
    assert not [line for line in err.splitlines() if line.startswith("{")]  # no JSON lines left
    assert list(tmp_path.iterdir()) == []


def test_docs_name_every_setting_and_every_metric() -> None:
    from qwen_npu.metrics.catalogue import CATALOGUE
    from qwen_npu.sidecar.config import FLAGS, Settings, env_name

    docs = (REPO / "docs" / "sidecar.md").read_text()
    for field in Settings.model_fields:
        assert f"`{env_name(field)}`" in docs, field
    for flag in FLAGS.values():
        assert f"`{flag}`" in docs, flag
    for spec in CATALOGUE:
        assert f"| `{spec.name}` |" in docs, spec.name


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path, busy_port: int) -> None:
    port = busy_port
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "qwen_npu",
            "sidecar",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("QWEN_NPU_")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"qwen-npu sidecar: error: cannot listen on 127.0.0.1:{port} (Address already in use); "
        "pick a free port with --port / QWEN_NPU_SIDECAR_PORT"
    )
