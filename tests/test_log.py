"""qwen_npu/log.py: one line shape for every part, `qwen_npu.<part> level=... event=... k=v ...`."""

from __future__ import annotations

import logging
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.checkpoints import write_checkpoint
from qwen_npu import log, processes


def fields_of(line: str) -> tuple[str, dict[str, str]]:
    """The logger name and the key=value fields of one line (logfmt quoting undone)."""
    name, *rest = shlex.split(line)
    return name, dict(word.split("=", 1) for word in rest)


def test_one_line_with_event_fields_and_next(capsys: pytest.CaptureFixture[str]) -> None:
    log.log("testpart", "warning", "disk.full", path="/var/lib/x y", used=0.97, skipped=None,
            next='free space, then "retry"')  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith('qwen_npu.testpart level=WARNING event=disk.full path="/var/lib/x y" ')
    name, fields = fields_of(err)
    assert name == "qwen_npu.testpart"
    assert fields == {
        "level": "WARNING",
        "event": "disk.full",
        "path": "/var/lib/x y",
        "used": "0.97",
        "next": 'free space, then "retry"',
    }


def test_every_part_writes_the_same_shape(capsys: pytest.CaptureFixture[str]) -> None:
    from qwen_npu.loadtest.progress import say

    patches_log = log.PartLog("patches")
    sidecar_log = log.PartLog("sidecar")

    patches_log("error", "patch.drifted", patch="p", next="port it")
    sidecar_log("warning", "engine_stuck_or_dead", next="restart the pod")
    log.PartLog("sim")("info", "ready", what="serving")
    say("progress", done="3/10")
    lines = capsys.readouterr().err.splitlines()
    parts = [fields_of(line) for line in lines]
    assert [name for name, _ in parts] == [
        "qwen_npu.patches",
        "qwen_npu.sidecar",
        "qwen_npu.sim",
        "qwen_npu.bench",
    ]
    assert all(list(f)[:2] == ["level", "event"] for _, f in parts)
    assert parts[1][1]["next"] == "restart the pod"


def test_a_library_record_comes_out_in_the_same_shape(capsys: pytest.CaptureFixture[str]) -> None:
    log.setup("testlib", "info", also=("testlib.server",))
    logging.getLogger("testlib.server").info("Started server process [%d]", 42)
    logging.getLogger("testlib.server").debug("not shown at info")
    err = capsys.readouterr().err
    assert err == (
        "qwen_npu.testlib level=INFO event=message logger=testlib.server "
        'msg="Started server process [42]"\n'
    )
    assert log.LINE.fullmatch(err.strip())


def test_level_names_and_the_threshold(capsys: pytest.CaptureFixture[str]) -> None:
    logger = log.get_logger("thresholdpart", "warn")
    log.log("thresholdpart", "info", "quiet")
    log.log("thresholdpart", "error", "loud")
    assert capsys.readouterr().err == "qwen_npu.thresholdpart level=ERROR event=loud\n"
    assert logger.level == logging.WARNING
    assert log.line("x", "warn", "e", k="a=b") == 'qwen_npu.x level=WARNING event=e k="a=b"'


def test_a_part_quieted_once_is_quiet_in_every_module(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two modules of one part each bind their own PartLog: a threshold the process sets through
    one (as `patches verify` does) holds for the other's first line too, the part's environment
    variable notwithstanding."""
    monkeypatch.setitem(log.LEVEL_ENV, "quiet-part", "QWEN_NPU_TEST_PART_LOG_LEVEL")
    monkeypatch.setenv("QWEN_NPU_TEST_PART_LOG_LEVEL", "INFO")
    first, second = log.PartLog("quiet-part"), log.PartLog("quiet-part")
    first.logger().setLevel("CRITICAL")
    second("warning", "not.shown")
    first("critical", "shown")
    assert [fields_of(line)[1]["event"] for line in capsys.readouterr().err.splitlines()] == [
        "shown"
    ]


def off_shape(text: str) -> list[str]:
    """The lines of a verb's output that look like log lines (a ``level=`` or an ``event=``) but
    do not match ``log.LINE``; a verb's one-line error (``qwen-npu VERB: error: ...``) aside."""
    return [
        line
        for line in text.splitlines()
        if ("level=" in line or "event=" in line)
        and not line.startswith("qwen-npu ")
        and not log.LINE.fullmatch(line)
    ]


def test_the_shape_rejects_the_old_hand_built_lines() -> None:
    assert off_shape("qwen_npu.patches level=info event=verify_passed patches=4") != []
    assert off_shape("qwen-npu-entrypoint level=error event=x next=y") != []
    assert off_shape("qwen-npu fetch: error: x: bad event=; fix it") == []  # a verb's error line
    assert off_shape("event=stale path=x") != []
    assert off_shape('qwen_npu.sim level=INFO event=ready what="a b" n=1') == []


@pytest.mark.slow
def test_every_verb_logs_in_one_shape(tmp_path: Path) -> None:
    """preflight, patches verify at start-up, dashboards and the simulator's start, as a user
    runs them: every log line they print matches ``log.LINE`` (the fetch, the release and the
    entrypoint are held to it in their own tests)."""
    ckpt = write_checkpoint(tmp_path / "35b", "35B-A3B")
    runs = [
        ["preflight", str(ckpt), "--tp", "2", "--mamba-ssm-dtype", "bfloat16"],
        ["patches", "verify", "--strict", "--startup", "--engine-args", "--model-path", "/m"],
        ["dashboards", "--check"],
    ]
    seen: list[str] = []
    for argv in runs:
        done = subprocess.run(
            [sys.executable, "-m", "qwen_npu", *argv], capture_output=True, text=True, timeout=120
        )
        text = done.stdout + done.stderr
        assert off_shape(text) == [], argv
        seen += [line for line in text.splitlines() if log.LINE.fullmatch(line)]
    port = processes.free_port()
    cmd = [sys.executable, "-m", "qwen_npu", "sim", "--profile", "fast-test", "--port", str(port)]
    sim_log = tmp_path / "sim.log"
    with processes.running(cmd, log=sim_log, ready_url=f"http://127.0.0.1:{port}/health"):
        pass
    text = sim_log.read_text()
    assert off_shape(text) == []
    seen += [line for line in text.splitlines() if log.LINE.fullmatch(line)]
    parts = {line.split()[0] for line in seen}
    assert {"qwen_npu.patches", "qwen_npu.dashboards", "qwen_npu.sim"} <= parts, seen
