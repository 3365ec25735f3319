"""The verb end to end: the installed dispatcher, the human table, the stable ``--json`` keys."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.hardware.test_ub_plan import UB_PLAN_KEYS
from tests.preflight.conftest import RunCli
from tools.paths import REPO

TOP_KEYS = {
    "schema_version",
    "model_dir",
    "verdict",
    "exit_code",
    "blocking",
    "findings",
    "files",
    "model",
    "mtp",
    "quantization",
    "patches",
    "tp",
    "ub_plan",
    "memory",
    "chip",
    "chart_values",
    "command",
    "command_line",
}
FINDING_KEYS = {"code", "severity", "message", "keys", "key_count"}
MEMORY_KEYS = {
    "source",
    "total_bytes",
    "mtp_bytes",
    "mtp_enabled",
    "tp",
    "per_npu_bytes",
    "mtp_per_npu_bytes",
    "npu_memory_gb",
    "mem_fraction_static",
    "budget_bytes",
    "headroom_bytes",
    "fits",
}


def test_dispatcher_runs_the_verb_in_a_fresh_process(ckpt_35b: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "QWEN_NPU_DISABLE_PATCHES": "all"}
    proc = subprocess.run(
        [sys.executable, "-m", "qwen_npu", "preflight", str(ckpt_35b), "--tp", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["verdict"] == "would_fail" and data["patches"]["disabled"]
    assert "Traceback" not in proc.stderr


def test_json_keys_are_stable(ckpt_35b: Path, run_cli: RunCli) -> None:
    code, data, err = run_cli(str(ckpt_35b), "--tp", "2", "--mamba-ssm-dtype", "bfloat16", "--json")
    assert code == 0 and err == ""
    assert set(data) == TOP_KEYS
    assert data["schema_version"] == 1 and data["verdict"] == "ready_with_patches"
    assert set(data["memory"]) == MEMORY_KEYS
    assert set(data["ub_plan"]) == UB_PLAN_KEYS and data["ub_plan"]["h_block_size"] == 2
    assert data["ub_plan"]["num_heads"] == 16
    assert set(data["tp"]) == {"tp", "source", "feasible", "candidates"}
    assert data["tp"]["feasible"] == [1, 2, 4, 8, 16]
    assert set(data["patches"]) == {"needed", "reasons", "disabled"}
    assert set(data["mtp"]) == {"requested", "enabled", "layers"}
    assert set(data["quantization"]["parts"]["mtp"]) == {"schemes", "label"}
    for finding in data["findings"]:
        assert set(finding) == FINDING_KEYS
    # By hand there is no engine command line: the chart values it judged instead.
    assert data["command"] is None and data["command_line"] is None
    assert data["chip"] == "910b"
    assert data["chart_values"] == {
        "npu.chip": "910b",
        "engine.tpSize": 2,
        "engine.memFractionStatic": 0.8,
        "engine.mambaSsmDtype": "bfloat16",
        "mtp.enabled": True,
    }


def test_human_table_ends_with_a_key_value_verdict(ckpt_35b: Path, run_cli: RunCli) -> None:
    code, out, _ = run_cli(str(ckpt_35b), "--tp", "3")
    assert code == 1
    lines = out.strip().splitlines()
    assert lines[0] == f"qwen-npu preflight {ckpt_35b}"
    assert lines[-1].startswith("verdict=would_fail exit=1 blocking=tp-indivisible")
    assert 'next="fix the blocking findings above' in lines[-1]
    assert any(line.strip().startswith("BLOCKING tp-indivisible:") for line in lines)
    assert any("mtp" in line and "FLOAT x" in line for line in lines)
    rows = [re.match(r"^\s+(\*?)\s*(\d+)\s+(yes|no)\s", line) for line in lines]
    table = [(m[1], int(m[2]), m[3]) for m in rows if m]
    assert [tp for _, tp, _ in table] == [1, 2, 3, 4, 8, 16]
    assert [(mark, ok) for mark, tp, ok in table if tp == 3] == [("*", "no")]


def test_no_mtp_flag(ckpt_35b: Path, run_cli: RunCli) -> None:
    code, data, _ = run_cli(str(ckpt_35b), "--no-mtp", "--chip", "ascend950", "--json")
    assert code == 0 and data["verdict"] == "ready" and data["mtp"]["enabled"] is False
    assert data["chart_values"]["mtp.enabled"] is False


def test_standard_library_only() -> None:
    """Preflight runs in the engine image's init container: nothing outside the stdlib."""
    code = (
        "import sys; import qwen_npu.preflight.cli, qwen_npu.preflight.render;"
        "print('\\n'.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PYTHONPATH": str(REPO)},
    )
    top = set(proc.stdout.split())
    foreign = top - set(sys.stdlib_module_names) - {"qwen_npu", "__main__"}
    assert "qwen_npu" in top and not foreign
