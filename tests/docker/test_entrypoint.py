"""The engine entrypoint, run for real with bash against stand-in CANN scripts and a stand-in
Python: CANN environment in the child, argument handling, exit status, signal forwarding, tini,
the NPU ids handed to the runtime, and the patch check before the model load."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwen_npu import log, processes

FAKE_PYTHON = """#!/usr/bin/env bash
# Stand-in for python3: records what it was started with, then behaves as FAKE_MODE says. The
# entrypoint's patch check (-m qwen_npu.cli patches verify) is answered apart (FAKE_VERIFY_EXIT).
out="$FAKE_OUT"
if [ "$1 $2" = "-m qwen_npu.cli" ]; then
  shift 2; echo "$*" >> "$out.verify"
  echo "SGLang import noise" >&2
  if [ "${FAKE_VERIFY_EXIT:-0}" = 0 ]; then
    echo 'qwen_npu.patches level=INFO event=verify_passed patches=4 states="a=applied"'
  else
    echo 'qwen_npu.patches level=ERROR event=verify_failed failed="a=drifted" next="fix it"'
  fi
  exit "${FAKE_VERIFY_EXIT:-0}"
fi
if [ "$1 $2" = "-m qwen_npu.hardware.kernel_contents" ]; then
  shift 2; echo "$*" >> "$out.ops"
  if [ "${FAKE_OPS_EXIT:-0}" = 0 ]; then
    echo 'qwen_npu.hardware level=INFO event=npu_ops_registered ops=causal_conv1d'
  else
    echo 'torch_npu import noise' >&2
    echo 'qwen_npu.hardware level=ERROR event=npu_op_missing ops=chunk_gated_delta_rule next="x"'
  fi
  exit "${FAKE_OPS_EXIT:-0}"
fi
{
  printf '{"argv": ['
  sep=""; for a in "$@"; do printf '%s"%s"' "$sep" "$a"; sep=", "; done
  printf '], "cann": "%s", "nnal_args": "%s", "loaded": "%s", "rt_visible": "%s", "pid": %s}\\n' \\
    "${FAKE_CANN:-}" "${FAKE_NNAL_ARGS:-}" "${QWEN_NPU_CANN_ENV_LOADED:-}" \\
    "${ASCEND_RT_VISIBLE_DEVICES:-}" "$$"
} > "$out"
case "${FAKE_MODE:-exit}" in
  exit) exit "${FAKE_EXIT:-0}" ;;
  wait)
    trap 'echo TERM >> "$out.signals"; exit 42' TERM
    touch "$out.ready"
    while :; do sleep 0.05; done ;;
esac
"""


@pytest.fixture()
def sandbox(tmp_path: Path, repo: Path) -> dict[str, object]:
    """Stand-in CANN install (two set_env scripts) and python3, plus the environment to run in."""
    cann = tmp_path / "Ascend"
    (cann / "toolkit").mkdir(parents=True)
    (cann / "nnal" / "atb").mkdir(parents=True)
    (cann / "toolkit" / "set_env.sh").write_text("export FAKE_CANN=toolkit\nfalse\n")
    (cann / "nnal" / "atb" / "set_env.sh").write_text('export FAKE_NNAL_ARGS="$*"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "QWEN_NPU_CANN_ENV_FILE": str(repo / "docker" / "cann-env.sh"),
        "QWEN_NPU_CANN_ENV_SCRIPTS": f"{cann}/toolkit/set_env.sh {cann}/nnal/atb/set_env.sh",
        "QWEN_NPU_PYTHON": str(python),
        "QWEN_NPU_INIT": "no-such-init",
        "FAKE_OUT": str(tmp_path / "record.json"),
    }
    return {"env": env, "record": tmp_path / "record.json", "tmp": tmp_path}


def entrypoint(repo: Path) -> str:
    return str(repo / "docker" / "engine-entrypoint.sh")


def run(
    repo: Path, sandbox: dict[str, object], *args: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    env = dict(sandbox["env"]) | extra  # type: ignore[call-overload]
    return subprocess.run(
        [entrypoint(repo), *args], env=env, capture_output=True, text=True, timeout=30
    )


def record(sandbox: dict[str, object]) -> dict[str, object]:
    data = json.loads(Path(str(sandbox["record"])).read_text())
    assert isinstance(data, dict)
    return data


def test_flags_start_sglang_with_the_cann_environment(
    repo: Path, sandbox: dict[str, object]
) -> None:
    done = run(repo, sandbox, "--model-path", "/models/q", "--tp-size", "2")
    assert done.returncode == 0, done.stderr
    seen = record(sandbox)
    assert seen["argv"] == [
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/q",
        "--tp-size",
        "2",
    ]
    assert seen["cann"] == "toolkit"  # sourced, although the script's last command failed
    assert seen["nnal_args"] == "--cxx_abi=1"
    assert seen["loaded"] == "1"
    assert "event=exec program=" in done.stderr and "args=6" in done.stderr


def test_no_arguments_start_sglang(repo: Path, sandbox: dict[str, object]) -> None:
    assert run(repo, sandbox).returncode == 0
    assert record(sandbox)["argv"] == ["-m", "sglang.launch_server"]


def test_a_command_runs_in_the_same_environment(repo: Path, sandbox: dict[str, object]) -> None:
    """The init container's `qwen-npu preflight ...` goes through the same entrypoint."""
    python = str(dict(sandbox["env"])["QWEN_NPU_PYTHON"])  # type: ignore[call-overload]
    done = run(repo, sandbox, python, "preflight", "/models/q", ATB_CXX_ABI="0")
    assert done.returncode == 0, done.stderr
    seen = record(sandbox)
    assert seen["argv"] == ["preflight", "/models/q"]
    assert seen["cann"] == "toolkit" and seen["nnal_args"] == "--cxx_abi=0"


def test_exit_status_is_the_engines(repo: Path, sandbox: dict[str, object]) -> None:
    assert run(repo, sandbox, "--port", "1", FAKE_EXIT="7").returncode == 7


def test_missing_set_env_script_is_one_warning_line(repo: Path, sandbox: dict[str, object]) -> None:
    done = run(repo, sandbox, "--x", QWEN_NPU_CANN_ENV_SCRIPTS="/nonexistent/set_env.sh")
    assert done.returncode == 0
    warnings = [line for line in done.stderr.splitlines() if "level=WARN" in line]
    assert warnings == [
        "qwen_npu.entrypoint level=WARNING event=cann_env_missing script=/nonexistent/set_env.sh "
        'next="check QWEN_NPU_CANN_ENV_SCRIPTS and the CANN base image (docs/images.md)"'
    ]


def test_bash_env_gives_non_interactive_shells_the_cann_environment(
    repo: Path, sandbox: dict[str, object]
) -> None:
    env = dict(sandbox["env"])  # type: ignore[call-overload]
    env["BASH_ENV"] = env["QWEN_NPU_CANN_ENV_FILE"]
    out = subprocess.run(
        ["bash", "-c", 'echo "$FAKE_CANN $QWEN_NPU_CANN_ENV_LOADED"'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["toolkit", "1"]
    assert out.stderr == ""  # no warnings outside the entrypoint


def test_as_in_the_image_bash_env_loads_once_and_warns_once(
    repo: Path, sandbox: dict[str, object]
) -> None:
    """The image sets BASH_ENV: the entrypoint's own bash loads the environment at start-up."""
    env = dict(sandbox["env"])  # type: ignore[call-overload]
    scripts = env["QWEN_NPU_CANN_ENV_SCRIPTS"] + " /nonexistent/set_env.sh"
    done = run(
        repo,
        sandbox,
        "--x",
        BASH_ENV=env["QWEN_NPU_CANN_ENV_FILE"],
        QWEN_NPU_CANN_ENV_SCRIPTS=scripts,
    )
    assert done.returncode == 0, done.stderr
    seen = record(sandbox)
    assert (
        seen["cann"] == "toolkit" and seen["nnal_args"] == "--cxx_abi=1" and seen["loaded"] == "1"
    )
    warnings = [line for line in done.stderr.splitlines() if "level=WARN" in line]
    assert len(warnings) == 1 and "script=/nonexistent/set_env.sh" in warnings[0]


def test_sigterm_reaches_the_engine(repo: Path, sandbox: dict[str, object]) -> None:
    env = dict(sandbox["env"]) | {"FAKE_MODE": "wait"}  # type: ignore[call-overload]
    out = Path(str(sandbox["record"]))
    log = Path(str(sandbox["tmp"])) / "entrypoint.log"
    proc = processes.start([entrypoint(repo), "--serve"], env=env, replace_env=True, log=log)
    try:
        ready = Path(f"{out}.ready")
        processes.wait_until(ready.exists, what=f"{ready}", proc=proc, log=log)
        assert record(sandbox)["pid"] == proc.pid  # exec: the engine is the entrypoint's process
        assert processes.stop(proc, grace_s=30, sig=signal.SIGTERM) == 42
        assert Path(f"{out}.signals").read_text().split() == ["TERM"]
    finally:
        processes.stop(proc)


def test_as_pid_1_it_runs_under_the_init(repo: Path, sandbox: dict[str, object]) -> None:
    """In a container the entrypoint is PID 1: it re-executes itself under tini."""
    tmp = Path(str(sandbox["tmp"]))
    init = tmp / "bin" / "fake-tini"
    init.write_text(
        '#!/usr/bin/env bash\necho "$$ $*" > "$FAKE_OUT.init"\n[ "$1" = -- ] && shift\n'
        '"$@"; exit $?\n'
    )
    init.chmod(0o755)
    env = dict(sandbox["env"]) | {"QWEN_NPU_INIT": str(init), "FAKE_EXIT": "3"}  # type: ignore[call-overload]
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--kill-child", "true"], capture_output=True, timeout=10
    )
    if probe.returncode != 0:
        pytest.fail(f"unshare --pid does not work here: {probe.stderr!r}")
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--kill-child", entrypoint(repo), "--tp-size", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 3, done.stderr
    pid, *argv = Path(f"{sandbox['record']}.init").read_text().split()
    assert pid == "1" and argv == ["--", entrypoint(repo), "--tp-size", "2"]
    seen = record(sandbox)
    assert seen["argv"] == ["-m", "sglang.launch_server", "--tp-size", "2"]
    assert seen["pid"] != 1 and seen["cann"] == "toolkit"


# ---------------------------------------------------------------- NPU devices (issue 14, item 2)


def fake_devices(sandbox: dict[str, object], *names: str) -> str:
    """A fresh stand-in /dev holding the given entries (the entrypoint reads QWEN_NPU_DEV_DIR)."""
    tmp = Path(str(sandbox["tmp"]))
    dev = tmp / f"dev{len(list(tmp.glob('dev*')))}"
    dev.mkdir()
    for name in names:
        (dev / name).touch()
    return str(dev)


def lines(done: subprocess.CompletedProcess[str], level: str) -> list[str]:
    return [line for line in done.stderr.splitlines() if f"level={level.upper()}" in line]


def davinci(*ids: int) -> list[str]:
    return [f"davinci{i}" for i in ids] + ["davinci_manager", "devmm_svm", "hisi_hdc"]


@pytest.mark.parametrize(
    ("allocated", "seen", "runtime"),
    [
        # The device plugin's container sees its own devices only: torch_npu numbers them 0..n-1.
        ("4,5", (4, 5), ""),
        ("2,3,6,7", (2, 3, 6, 7), ""),
        ("4,5", (0, 1), ""),  # a runtime that also renames the nodes
        # Privileged: every device of the node; the allocated ones by their position among them.
        ("4,5", tuple(range(8)), "4,5"),
        ("2,3,6,7", tuple(range(8)), "2,3,6,7"),
        ("4,5", (0, 2, 4, 5), "2,3"),
    ],
)
def test_allocated_devices_become_the_ids_torch_npu_expects(
    repo: Path, sandbox: dict[str, object], allocated: str, seen: tuple[int, ...], runtime: str
) -> None:
    n = len(allocated.split(","))
    dev = fake_devices(sandbox, *davinci(*seen))
    done = run(
        repo,
        sandbox,
        "--tp-size",
        str(n),
        ASCEND_VISIBLE_DEVICES=allocated,
        QWEN_NPU_EXPECTED_NPUS=str(n),
        QWEN_NPU_DEV_DIR=dev,
    )
    assert done.returncode == 0, done.stderr
    assert record(sandbox)["rt_visible"] == runtime
    assert ("event=visible_devices_mapped" in done.stderr) == bool(runtime)
    (ok,) = [x for x in lines(done, "info") if "event=npu_count_ok" in x]
    assert f"visible={n} expected={n}" in ok


def test_an_allocated_device_the_container_does_not_see_stops_it(
    repo: Path, sandbox: dict[str, object]
) -> None:
    dev = fake_devices(sandbox, *davinci(0, 1, 2, 3))
    done = run(repo, sandbox, "--x", ASCEND_VISIBLE_DEVICES="2,5,6", QWEN_NPU_DEV_DIR=dev)
    assert done.returncode == 3
    (error,) = lines(done, "error")
    assert "event=allocated_npu_not_visible" in error and "missing=5 seen=0,1,2,3" in error
    assert not Path(str(sandbox["record"])).exists()


def annotations(sandbox: dict[str, object], text: str) -> str:
    """A stand-in of the chart's downwardAPI annotations file."""
    path = (
        Path(str(sandbox["tmp"]))
        / f"annotations{len(list(Path(str(sandbox['tmp'])).glob('annotations*')))}"
    )
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("visible", "real", "seen", "runtime"),
    [
        ("", "Ascend910-4,Ascend910-5", tuple(range(8)), "4,5"),  # only the device plugin's record
        ("0,1", "Ascend910-4,Ascend910-5", tuple(range(8)), "4,5"),  # the record wins, one warning
        ("4,5", "", tuple(range(8)), "4,5"),  # no annotation: ASCEND_VISIBLE_DEVICES as before
    ],
)
def test_the_device_plugins_ascend_real_annotation_is_the_allocation(
    repo: Path,
    sandbox: dict[str, object],
    visible: str,
    real: str,
    seen: tuple[int, ...],
    runtime: str,
) -> None:
    text = 'kubernetes.io/config.seen="x"\n'
    if real:
        text += f'huawei.com/AscendReal="{real}"\nhuawei.com/Ascend910="Ascend910-0,Ascend910-1"\n'
    env = {"QWEN_NPU_POD_ANNOTATIONS": annotations(sandbox, text)}
    if visible:
        env["ASCEND_VISIBLE_DEVICES"] = visible
    dev = fake_devices(sandbox, *davinci(*seen))
    done = run(repo, sandbox, "--x", QWEN_NPU_EXPECTED_NPUS="2", QWEN_NPU_DEV_DIR=dev, **env)
    assert done.returncode == 0, done.stderr
    assert record(sandbox)["rt_visible"] == runtime
    disagrees = [x for x in lines(done, "warning") if "event=allocation_disagrees" in x]
    assert len(disagrees) == (1 if visible and real and visible != "4,5" else 0), done.stderr


def test_an_explicit_runtime_variable_is_kept(repo: Path, sandbox: dict[str, object]) -> None:
    dev = fake_devices(sandbox, *davinci(*range(8)))
    done = run(
        repo,
        sandbox,
        "--x",
        ASCEND_VISIBLE_DEVICES="4,5",
        ASCEND_RT_VISIBLE_DEVICES="0,1",
        QWEN_NPU_DEV_DIR=dev,
    )
    assert done.returncode == 0, done.stderr
    assert record(sandbox)["rt_visible"] == "0,1"
    assert "visible_devices_mapped" not in done.stderr


def test_npu_count_from_the_runtime_variable(repo: Path, sandbox: dict[str, object]) -> None:
    ok = run(
        repo,
        sandbox,
        "--tp-size",
        "4",
        QWEN_NPU_EXPECTED_NPUS="4",
        ASCEND_RT_VISIBLE_DEVICES="0, 1,2,3",
        QWEN_NPU_DEV_DIR=fake_devices(sandbox),
    )
    assert ok.returncode == 0, ok.stderr
    assert any("event=npu_count_ok visible=4 expected=4" in x for x in lines(ok, "info"))

    record_file = Path(str(sandbox["record"]))
    record_file.unlink()
    bad = run(
        repo, sandbox, "--tp-size", "8", QWEN_NPU_EXPECTED_NPUS="8", ASCEND_RT_VISIBLE_DEVICES="6,7"
    )
    assert bad.returncode == 3
    (error,) = lines(bad, "error")
    assert "event=npu_count_mismatch visible=2 expected=8 from=ASCEND_RT_VISIBLE_DEVICES" in error
    assert not record_file.exists(), "SGLang was started although the NPU count is wrong"


def test_npu_count_is_what_the_runtime_sees_not_the_allocation(
    repo: Path, sandbox: dict[str, object]
) -> None:
    """Two ids allocated, but the container sees no device: torch_npu would find none."""
    done = run(
        repo,
        sandbox,
        "--x",
        QWEN_NPU_EXPECTED_NPUS="2",
        ASCEND_VISIBLE_DEVICES="4,5",
        QWEN_NPU_DEV_DIR=fake_devices(sandbox),
    )
    assert done.returncode == 3
    (error,) = lines(done, "error")
    assert "visible=0 expected=2" in error


def test_npu_count_from_the_davinci_device_entries(repo: Path, sandbox: dict[str, object]) -> None:
    dev = fake_devices(sandbox, *davinci(0, 1, 2, 3))
    ok = run(repo, sandbox, "--x", QWEN_NPU_EXPECTED_NPUS="4", QWEN_NPU_DEV_DIR=dev)
    assert ok.returncode == 0, ok.stderr
    assert record(sandbox)["rt_visible"] == ""  # nothing to map: devices only

    bad = run(repo, sandbox, "--x", QWEN_NPU_EXPECTED_NPUS="8", QWEN_NPU_DEV_DIR=dev)
    assert bad.returncode == 3
    assert lines(bad, "error") == [
        "qwen_npu.entrypoint level=ERROR event=npu_count_mismatch visible=4 expected=8 "
        f'from={dev}/davinci[0-9]* next="give the pod 8 NPUs (tpSize / nodes) or fix the '
        "device plugin's visible devices\""
    ]
    none = run(
        repo, sandbox, "--x", QWEN_NPU_EXPECTED_NPUS="1", QWEN_NPU_DEV_DIR=fake_devices(sandbox)
    )
    assert none.returncode == 3 and "visible=0 expected=1" in none.stderr


# ------------------------------------------------ the patch check before the model load (issue 22)


def test_the_full_patch_check_runs_before_sglang_and_says_so(
    repo: Path, sandbox: dict[str, object]
) -> None:
    state = Path(str(sandbox["tmp"])) / "state"
    done = run(repo, sandbox, "--model-path", "/m", QWEN_NPU_STATE_DIR=str(state))
    assert done.returncode == 0, done.stderr
    assert Path(f"{sandbox['record']}.verify").read_text().split() == [
        "patches",
        "verify",
        "--strict",
        "--startup",
        "--engine-args",  # strictness follows the engine's mode (issue 33)
        "--model-path",
        "/m",
    ]
    argv = record(sandbox)["argv"]
    assert isinstance(argv, list) and argv[:2] == ["-m", "sglang.launch_server"]
    passed = [x for x in done.stderr.splitlines() if "event=verify_passed" in x]
    assert len(passed) == 1
    assert "SGLang import noise" not in done.stderr  # kept in the state directory instead
    assert "SGLang import noise" in (state / "patches-verify.log").read_text()


def test_a_failed_patch_check_stops_before_the_model_load_with_one_line(
    repo: Path, sandbox: dict[str, object]
) -> None:
    state = Path(str(sandbox["tmp"])) / "state"
    done = run(
        repo, sandbox, "--model-path", "/m", QWEN_NPU_STATE_DIR=str(state), FAKE_VERIFY_EXIT="1"
    )
    assert done.returncode == 4
    assert not Path(str(sandbox["record"])).exists(), "SGLang started after a failed check"
    (error,) = lines(done, "error")
    assert "event=verify_failed" in error and f"log={state}/patches-verify.log" in error
    assert "event=exec" not in done.stderr


def test_help_and_other_commands_skip_the_patch_check(
    repo: Path, sandbox: dict[str, object]
) -> None:
    python = str(dict(sandbox["env"])["QWEN_NPU_PYTHON"])  # type: ignore[call-overload]
    assert run(repo, sandbox, "--help", FAKE_VERIFY_EXIT="1").returncode == 0
    assert run(repo, sandbox, python, "preflight", FAKE_VERIFY_EXIT="1").returncode == 0
    assert not Path(f"{sandbox['record']}.verify").exists()


@pytest.mark.parametrize("value", ["two", "0", "-1", "2.0"])
def test_a_bad_expected_count_is_one_line(
    repo: Path, sandbox: dict[str, object], value: str
) -> None:
    done = run(repo, sandbox, "--x", QWEN_NPU_EXPECTED_NPUS=value, ASCEND_RT_VISIBLE_DEVICES="0")
    assert done.returncode == 2
    (error,) = lines(done, "error")
    assert f"event=bad_expected_npus QWEN_NPU_EXPECTED_NPUS={value} " in error


def test_other_commands_skip_the_npu_check(repo: Path, sandbox: dict[str, object]) -> None:
    """Only the SGLang start needs the NPUs: preflight or a shell in the same image does not."""
    python = str(dict(sandbox["env"])["QWEN_NPU_PYTHON"])  # type: ignore[call-overload]
    dev = fake_devices(sandbox)
    done = run(repo, sandbox, python, "preflight", QWEN_NPU_EXPECTED_NPUS="8", QWEN_NPU_DEV_DIR=dev)
    assert done.returncode == 0, done.stderr
    assert "npu_count" not in done.stderr


@pytest.mark.parametrize("caller", ["set -e", "set +e"])
def test_sourcing_the_cann_environment_keeps_the_callers_errexit(
    repo: Path, sandbox: dict[str, object], caller: str
) -> None:
    """`$(set +o)` runs in a subshell, which does not inherit errexit: the restore must keep it."""
    env = dict(sandbox["env"])  # type: ignore[call-overload]
    script = f'{caller}; . "$QWEN_NPU_CANN_ENV_FILE"; echo "flags=$-"; false; echo after-false'
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert "flags=" in done.stdout, done.stderr
    if caller == "set -e":
        assert "e" in done.stdout.split("flags=")[1].split()[0]
        assert "after-false" not in done.stdout and done.returncode == 1
    else:
        assert "after-false" in done.stdout and done.returncode == 0


# ---------------------------------------------------- the host driver and device access (issue 33)


def test_the_gdn_ops_are_looked_up_after_the_patch_check_and_a_missing_one_stops_the_start(
    repo: Path, sandbox: dict[str, object]
) -> None:
    state = Path(str(sandbox["tmp"])) / "state"
    npu = {"QWEN_NPU_STATE_DIR": str(state), "QWEN_NPU_DEV_DIR": fake_devices(sandbox, *davinci(0))}
    ok = run(repo, sandbox, "--model-path", "/m", **npu)
    assert ok.returncode == 0, ok.stderr
    assert Path(f"{sandbox['record']}.ops").read_text().split() == ["--registered"]
    assert "event=npu_ops_registered" in ok.stderr
    Path(str(sandbox["record"])).unlink()
    bad = run(repo, sandbox, "--model-path", "/m", **npu, FAKE_OPS_EXIT="1")
    assert bad.returncode == 7
    (error,) = lines(bad, "ERROR")
    assert "event=npu_op_missing ops=chunk_gated_delta_rule" in error
    assert f"log={state}/npu-ops.log" in error
    assert "torch_npu import noise" in (state / "npu-ops.log").read_text()
    assert not Path(str(sandbox["record"])).exists(), "SGLang started without its GDN ops"


#: version.info as the Ascend driver installs it (/usr/local/Ascend/driver/version.info); the
#: lines after `Version=` are those of a real 24.1/25.x install.
VERSION_INFO = """Version={version}
ascendhal_version=7.35.23
aicpu_version=1.0
tdt_version=1.0
log_version=1.0
prof_version=2.0
dvppkernels_version=1.1
tsfw_version=1.0
Innerversion=V100R001C23SPC002B212
compatible_version=[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C22],[V100R001C23]
compatible_version_fw=[7.0.0,7.8.99]
package_version={package}
"""


def version_info(sandbox: dict[str, object], version: str, package: str | None = None) -> str:
    path = Path(str(sandbox["tmp"])) / f"version-{version}.info"
    path.write_text(VERSION_INFO.format(version=version, package=package or version))
    return str(path)


@pytest.mark.parametrize(
    ("installed", "package", "ok"),
    [
        ("25.2.0", None, True),
        ("25.3.rc1", None, True),
        ("26.0.rc1", None, True),
        ("25.0.rc1.1", None, False),  # CANN 9.1.x: 25.0.x marked unsupported
        ("24.1.rc2.2", None, False),
        # A component version under Version=, the HDK under package_version= (which wins)
        ("7.35.23", "25.5.2", True),
        ("7.35.23", "24.1.rc1", False),
    ],
)
def test_the_driver_below_the_supported_hdk_is_refused_in_one_line(
    repo: Path, sandbox: dict[str, object], installed: str, package: str | None, ok: bool
) -> None:
    info = version_info(sandbox, installed, package)
    done = run(
        repo,
        sandbox,
        "--x",
        QWEN_NPU_MIN_HDK_VERSION="25.2",
        QWEN_NPU_DRIVER_VERSION_FILE=info,
        QWEN_NPU_HDK_NODE_LABEL="example.com/hdk",
    )
    have = package or installed
    if ok:
        assert done.returncode == 0, done.stderr
        assert f"event=driver_ok installed={have} needed=25.2+" in done.stderr
        return
    assert done.returncode == 5
    assert not Path(str(sandbox["record"])).exists(), "SGLang started on an unsupported driver"
    (error,) = lines(done, "error")
    assert f"event=driver_unsupported installed={have} needed=25.2+ file={info} " in error
    assert "example.com/hdk" in error and "scheduling.driverVersion" in error
    assert "event=verify" not in done.stderr  # stopped before the patch check


def test_without_the_driver_file_it_warns_and_outside_the_image_it_says_nothing(
    repo: Path, sandbox: dict[str, object]
) -> None:
    missing = run(
        repo,
        sandbox,
        "--x",
        QWEN_NPU_MIN_HDK_VERSION="25.2",
        QWEN_NPU_DRIVER_VERSION_FILE="/nonexistent/version.info",
    )
    assert missing.returncode == 0, missing.stderr
    (warning,) = [x for x in lines(missing, "warning") if "driver_version" in x]
    assert "event=driver_version_unknown file=/nonexistent/version.info needed=25.2+" in warning
    outside = run(repo, sandbox, "--x", QWEN_NPU_DRIVER_VERSION_FILE="/nonexistent/version.info")
    assert outside.returncode == 0 and "event=driver_" not in outside.stderr
    bad = run(repo, sandbox, "--x", QWEN_NPU_MIN_HDK_VERSION="25")
    assert bad.returncode == 2 and "event=bad_min_hdk_version" in bad.stderr


def test_the_image_bakes_the_minimum_from_the_versions_file(
    repo: Path, versions: dict[str, str]
) -> None:
    text = (repo / "docker" / "engine.Dockerfile").read_text()
    assert "QWEN_NPU_MIN_HDK_VERSION=${CANN_MIN_HDK_VERSION}" in text
    assert versions["CANN_MIN_HDK_VERSION"] == "25.2"


@pytest.fixture()
def shared_tmp() -> Iterator[Path]:
    """A directory another uid can enter (pytest's tmp_path is root's 0700 tree)."""
    path = Path(tempfile.mkdtemp(prefix="qwen-npu-devices-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def device_nodes(root: Path, gid: int, mode: int, *ids: int) -> Path:
    """Stand-in device nodes with the owner gid and mode of the real ones (0660 HwHiAiUser)."""
    dev = root / "dev"
    dev.mkdir()
    for name in ["davinci_manager", *(f"davinci{i}" for i in ids), "devmm_svm", "hisi_hdc"]:
        node = dev / name
        node.touch()
        os.chown(node, 0, gid)
        node.chmod(mode)
    return dev


def run_as(
    repo: Path, root: Path, uid: int, groups: list[int], **env: str
) -> subprocess.CompletedProcess[str]:
    """The entrypoint as a non-root uid with the given supplementary groups (setpriv), as the
    chart's securityContext runs it, with a stand-in python3 that uid can execute. The entrypoint
    and its CANN script run from copies in `root` (0755): the checkout may sit in a folder that uid
    cannot enter (a clone under `mktemp -d` is 0700; issue 42)."""
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    bin_dir.chmod(0o755)
    python = bin_dir / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    for name in ("engine-entrypoint.sh", "cann-env.sh"):
        copy = bin_dir / name
        shutil.copyfile(repo / "docker" / name, copy)
        copy.chmod(0o755)
    out = root / "out"
    out.mkdir(mode=0o777, exist_ok=True)
    out.chmod(0o777)
    base = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "QWEN_NPU_CANN_ENV_FILE": str(bin_dir / "cann-env.sh"),
        "QWEN_NPU_CANN_ENV_SCRIPTS": "",
        "QWEN_NPU_PYTHON": str(python),
        "QWEN_NPU_INIT": "no-such-init",
        "QWEN_NPU_STATE_DIR": str(out),
        "FAKE_OUT": str(out / "record.json"),
    }
    cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}"]
    cmd += [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    return subprocess.run(
        [*cmd, str(bin_dir / "engine-entrypoint.sh"), "--model-path", "/m"],
        env=base | env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_device_the_engine_cannot_open_is_named_with_its_group(
    repo: Path, shared_tmp: Path
) -> None:
    """Real permission checks: uid 1000 without the devices' group (1234) cannot open them."""
    dev = device_nodes(shared_tmp, 1234, 0o660, 0, 1)
    denied = run_as(repo, shared_tmp, 1000, [], QWEN_NPU_DEV_DIR=str(dev))
    assert denied.returncode == 6, denied.stderr
    (error,) = lines(denied, "error")
    assert f"event=npu_device_denied node={dev}/davinci_manager owner_gid=1234 mode=660 " in error
    assert "uid=1000 " in error and "npu.deviceGroupId=1234" in error
    assert not (shared_tmp / "out" / "record.json").exists(), "SGLang started without devices"

    granted = run_as(repo, shared_tmp, 1000, [1234], QWEN_NPU_DEV_DIR=str(dev))
    assert granted.returncode == 0, granted.stderr
    # davinci_manager, devmm_svm, hisi_hdc and the two davinciN
    assert "event=npu_devices_open nodes=5 owner_gid=1234" in granted.stderr


def test_a_device_outside_the_group_is_found_too(repo: Path, shared_tmp: Path) -> None:
    """davinci_manager opens, davinci1 belongs to another group: that node is named."""
    dev = device_nodes(shared_tmp, 1234, 0o660, 0, 1)
    os.chown(dev / "davinci1", 0, 4321)
    done = run_as(repo, shared_tmp, 1000, [1234], QWEN_NPU_DEV_DIR=str(dev))
    assert done.returncode == 6
    assert f"node={dev}/davinci1 owner_gid=4321 " in done.stderr


@pytest.mark.parametrize("shared", ["devmm_svm", "hisi_hdc"])
def test_the_shared_memory_and_hdc_nodes_are_opened_as_the_pods_user(
    repo: Path, shared_tmp: Path, shared: str
) -> None:
    """torch_npu needs devmm_svm and hisi_hdc beside the davinci nodes (issue 41): one the pod's
    user cannot open is named with its group before the model load, not at the first allocation."""
    dev = device_nodes(shared_tmp, 1234, 0o660, 0, 1)
    os.chown(dev / shared, 0, 4321)
    done = run_as(repo, shared_tmp, 1000, [1234], QWEN_NPU_DEV_DIR=str(dev))
    assert done.returncode == 6, done.stderr
    (error,) = [x for x in done.stderr.splitlines() if "level=error" in x.lower()]
    assert f"event=npu_device_denied node={dev}/{shared} owner_gid=4321 " in error
    assert "npu.deviceGroupId=4321" in error
    assert not (shared_tmp / "out" / "record.json").exists(), "SGLang started without devices"


@pytest.mark.parametrize("shared", ["davinci_manager", "devmm_svm", "hisi_hdc"])
def test_a_missing_shared_device_node_stops_the_start_naming_it(
    repo: Path, sandbox: dict[str, object], shared: str
) -> None:
    dev = fake_devices(sandbox, *(n for n in davinci(0, 1) if n != shared))
    done = run(repo, sandbox, "--x", QWEN_NPU_DEV_DIR=dev)
    assert done.returncode == 6, done.stderr
    (error,) = lines(done, "error")
    assert f"event=npu_device_missing node={dev}/{shared} seen=2 " in error
    assert not Path(str(sandbox["record"])).exists(), "SGLang started without devices"


def test_davinci_nodes_without_the_manager_stop_the_start(
    repo: Path, sandbox: dict[str, object]
) -> None:
    dev = fake_devices(sandbox, "davinci0", "davinci1")
    done = run(repo, sandbox, "--x", QWEN_NPU_DEV_DIR=dev)
    assert done.returncode == 6
    (error,) = lines(done, "error")
    assert f"event=npu_device_missing node={dev}/davinci_manager seen=2 " in error


def test_without_npu_device_nodes_the_op_lookup_is_skipped_in_one_line(
    repo: Path, sandbox: dict[str, object]
) -> None:
    """The CPU stand-in image (SGLang on its CPU path) has no NPU ops to load."""
    Path(f"{sandbox['record']}.ops").unlink(missing_ok=True)
    done = run(repo, sandbox, "--model-path", "/m", QWEN_NPU_DEV_DIR=fake_devices(sandbox))
    assert done.returncode == 0, done.stderr
    assert "event=npu_ops_check_skipped" in done.stderr
    assert not Path(f"{sandbox['record']}.ops").exists()


def test_every_line_of_a_start_and_its_refusals_has_the_one_shape(
    repo: Path, sandbox: dict[str, object]
) -> None:
    """The entrypoint's lines and the ones it passes on (the patch check's, the ops check's) are
    qwen_npu/log.py's shape, level upper case: one grep reads a start whatever part spoke."""
    dev = fake_devices(sandbox, *davinci(0, 1))
    driver = version_info(sandbox, "25.2.0")
    runs = [
        run(repo, sandbox, "--model-path", "/m", QWEN_NPU_EXPECTED_NPUS="2", QWEN_NPU_DEV_DIR=dev,
            QWEN_NPU_MIN_HDK_VERSION="25.2", QWEN_NPU_DRIVER_VERSION_FILE=driver,
            ASCEND_VISIBLE_DEVICES="0,1"),
        run(repo, sandbox, "--x", QWEN_NPU_CANN_ENV_SCRIPTS="/nonexistent/set_env.sh"),
        run(repo, sandbox, "--x", QWEN_NPU_EXPECTED_NPUS="8", QWEN_NPU_DEV_DIR=dev),
        run(repo, sandbox, "--x", QWEN_NPU_EXPECTED_NPUS="x"),
        run(repo, sandbox, "--model-path", "/m", FAKE_VERIFY_EXIT="1",
            QWEN_NPU_STATE_DIR=str(Path(str(sandbox["tmp"])) / "state")),
    ]  # fmt: skip
    said = [line for done in runs for line in done.stderr.splitlines()]
    assert [line for line in said if not log.LINE.fullmatch(line)] == []
    events = {line.split()[2] for line in said}
    assert {"event=npu_count_ok", "event=driver_ok", "event=npu_devices_open"} <= events
    assert {"event=verify_passed", "event=verify_failed", "event=exec"} <= events
    assert {
        "event=cann_env_missing",
        "event=npu_count_mismatch",
        "event=bad_expected_npus",
    } <= events
