"""The images, built for real by `make image-test` (podman, the same Dockerfiles and make targets as
on a Docker host) and run here: the sidecar read-only and non-root against `qwen-npu sim`, its
probes and HEALTHCHECK healthy then unhealthy, SIGTERM; the engine's cpu flavour, a build host's
view (torch_npu without a device): its build check on both Pythons, the entrypoint's full patch
check before the model load (failing there, passing on the CPU path), its entrypoint as PID 1, HOME
for any uid; and the built images' metadata against the chart, the Dockerfiles and
docker/versions.env.

The images are made by make, not here: `make image-test` (and `make test`, whose prerequisites
build them). Without podman or an image these tests fail, naming the target.
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from qwen_npu import processes
from qwen_npu.patches.registry import OK_STATES, PATCHES
from qwen_npu.sim.testing import running_sim_process

from .containers import (
    CONTAINERS_CONF,
    chart_images,
    make_refs,
    podman,
    remove_container,
    require_image,
)
from .dockerfile_parse import Dockerfile, expand, key_values, parse

pytestmark = pytest.mark.system  # needs podman and the images `make image-test` builds

# What our sidecar Dockerfile may add on top of its base (issue 18's goal).
SIDECAR_ADDED_BUDGET_BYTES = 75 * 1000 * 1000
# `podman stop --time`: SIGTERM, then SIGKILL after this; a SIGKILLed container exits 137.
STOP_GRACE_S = 30
# What `podman diff` lists for any container: the files podman bind-mounts and their parents.
PODMAN_MOUNT_POINTS = {
    "/etc",
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/run",
    "/run/.containerenv",
}


@pytest.fixture(scope="module")
def refs() -> dict[str, str]:
    return make_refs()


@pytest.fixture(scope="module")
def sidecar_image(refs: dict[str, str]) -> dict[str, Any]:
    return require_image(refs["sidecar"], "image-sidecar DOCKER=podman")


@pytest.fixture(scope="module")
def engine_image(refs: dict[str, str]) -> dict[str, Any]:
    return require_image(refs["engine-cpu"], "image-engine-cpu")


def _name(prefix: str) -> str:
    return f"qwen-npu-test-{prefix}-{uuid.uuid4().hex[:8]}"


def _healthcheck(name: str) -> int:
    return podman("healthcheck", "run", name, timeout=60).returncode


def _health_status(name: str) -> str:
    done = podman("inspect", "--format", "{{.State.Health.Status}}", name, timeout=60)
    return done.stdout.strip()


# ------------------------------------------------------------------------------------- sidecar


def test_sidecar_layers_stay_within_the_goal(
    sidecar_image: dict[str, Any], versions: dict[str, str]
) -> None:
    """What our Dockerfile adds to its base (the stand-in base is larger than the official one)."""
    base_ref = (
        f"docker.io/library/python:{versions['SIDECAR_PYTHON_VERSION']}-slim-"
        f"{versions['SIDECAR_DEBIAN_RELEASE']}"
    )
    base = require_image(base_ref, "image-standin-base")
    added = int(sidecar_image["Size"]) - int(base["Size"])
    assert 0 < added < SIDECAR_ADDED_BUDGET_BYTES, f"our sidecar layers add {added / 1e6:.1f} MB"


def test_sidecar_runs_read_only_non_root_and_its_healthcheck_flips(
    sidecar_image: dict[str, Any], refs: dict[str, str], tmp_path: Path
) -> None:
    """Against `qwen-npu sim` on the host: probes and HEALTHCHECK healthy, unhealthy once the
    engine is gone, and SIGTERM stops it cleanly (not killed after the grace period)."""
    name = _name("sidecar")
    port = processes.free_port()
    with running_sim_process(profile="fast-test") as (engine_url, sim):
        cmd = [
            "podman",
            "run",
            "--name",
            name,
            "--read-only",
            "--read-only-tmpfs=false",
            "--network",
            "host",
            "--env",
            f"QWEN_NPU_ENGINE_URL={engine_url}",
            "--env",
            "QWEN_NPU_SIDECAR_HOST=127.0.0.1",
            "--env",
            f"QWEN_NPU_SIDECAR_PORT={port}",
            "--env",
            "QWEN_NPU_POLL_INTERVAL_S=0.2",
            "--env",
            "QWEN_NPU_HEALTH_TIMEOUT_S=2",
            "--env",
            "QWEN_NPU_LIVENESS_FAILURES=1",
            "--env",
            "QWEN_NPU_CANARY_INTERVAL_S=0",
            refs["sidecar"],
        ]
        log = tmp_path / "podman-run.log"
        container = processes.start(cmd, log=log, env={"CONTAINERS_CONF": _conf()})
        try:
            base = f"http://127.0.0.1:{port}"
            processes.wait_http(f"{base}/livez", proc=container, log=log, timeout_s=120)
            processes.wait_http(f"{base}/readyz", proc=container, log=log)
            metrics = _get_text(f"{base}/metrics")
            assert re.search(r"^qwen_npu_engine_ready 1(\.0)?$", metrics, re.M), metrics[-2000:]

            user = podman("exec", name, "id", "-u").stdout.strip()
            assert user == "10001"
            processes.wait_until(
                lambda: _healthcheck(name) == 0 and _health_status(name) == "healthy",
                what="podman healthcheck run: healthy",
                proc=container,
                log=log,
            )

            processes.stop(sim)  # the engine is gone: refused probes
            processes.wait_until(
                lambda: processes.http_status(f"{base}/readyz") == 503,
                what="/readyz 503 without an engine",
                proc=container,
                log=log,
            )
            processes.wait_until(
                lambda: _healthcheck(name) != 0 and _health_status(name) == "unhealthy",
                what="podman healthcheck run: unhealthy",
                proc=container,
                log=log,
            )
            # Read-only root, and nothing written but podman's own mount points.
            changed = {line.split()[-1] for line in podman("diff", name).stdout.splitlines()}
            assert changed <= PODMAN_MOUNT_POINTS, changed

            stopped = podman("stop", "--time", str(STOP_GRACE_S), name, timeout=STOP_GRACE_S + 60)
            assert stopped.returncode == 0, stopped.stderr
            status = container.wait(timeout=60)
            assert status == 0, f"exit {status} (137: killed after {STOP_GRACE_S} s)\n" + (
                processes.log_tail(log)
            )
        finally:
            processes.stop(container)
            remove_container(name)


def _conf() -> str:
    return str(CONTAINERS_CONF)


def _get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode())


# -------------------------------------------------------------------------------- engine (cpu)


def _run(image: str, *args: str, env: dict[str, str] | None = None) -> Any:
    flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
    return podman("run", "--rm", "--network", "none", *flags, image, *args, timeout=280)


def test_the_image_is_the_build_host_torch_npu_without_a_device(
    refs: dict[str, str], engine_image: Any
) -> None:
    """`import torch` loads torch_npu (no device): SGLang's targets cannot be imported, so the full
    check fails there as it would on a Docker build host (issue 22), naming the cause."""
    done = _run(
        refs["engine-cpu"], "python3", "-c", "import torch; print(torch.npu.is_available())"
    )
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stdout + done.stderr
    done = _run(refs["engine-cpu"], "qwen-npu", "patches", "verify", "--strict")
    assert done.returncode == 1, done.stdout + done.stderr
    for patch in PATCHES:
        assert re.search(rf"^{re.escape(patch.name)}\s+target-missing\b", done.stdout, re.M)
    assert "NPU device is not available" in done.stdout


def test_the_build_check_passes_there_on_both_pythons(
    refs: dict[str, str], engine_image: Any, versions: dict[str, str]
) -> None:
    """What the build ran, again: on the stack's Python and on the engine's (--site)."""
    done = _run(refs["engine-cpu"], "qwen-npu", "patches", "verify", "--build", "--strict")
    assert done.returncode == 0, done.stdout + done.stderr
    for patch in PATCHES:
        assert re.search(rf"^{re.escape(patch.name)}\s+pinned\b", done.stdout, re.M), done.stdout
    assert "kernel tiles" in done.stdout and "pth hook: ok" in done.stdout
    site = f"/opt/venv/lib/python{versions['TEST_PYTHON_VERSION']}/site-packages"
    engine_python = ["/opt/engine-python/bin/python", "-m", "qwen_npu.cli"]
    done = _run(
        refs["engine-cpu"],
        *engine_python,
        "patches",
        "verify",
        "--build",
        "--strict",
        "--site",
        site,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"build check on Python {versions['ENGINE_PYTHON_VERSION']}." in done.stdout
    assert "pth hook: ok: loaded at start-up from /opt/engine-python/" in done.stdout


def test_the_start_check_stops_the_engine_before_the_model_load_with_one_line(
    refs: dict[str, str], engine_image: Any
) -> None:
    """The entrypoint's full check, where it cannot pass (torch_npu without a device)."""
    done = _run(refs["engine-cpu"], "--model-path", "/models/x")
    assert done.returncode == 4, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "level=ERROR" in line]
    assert len(errors) == 1, done.stderr
    assert "event=verify_failed" in errors[0] and "target-missing" in errors[0]
    assert "log=/var/lib/qwen-npu/state/patches-verify.log" in errors[0]
    assert "event=exec" not in done.stderr  # SGLang never started


def test_the_start_check_passes_and_says_so_in_the_log_and_the_state_file(
    refs: dict[str, str], engine_image: Any, tmp_path: Path
) -> None:
    """On the CPU path (torch_npu not loaded), the same check passes for the chart's default mode
    (MTP on), before SGLang starts. The MTP-off decode patch's kernel is sgl-kernel-npu's, which
    SGLang binds only on an NPU: here its target is missing, which this mode does not run."""
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    done = podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--env=TORCH_DEVICE_BACKEND_AUTOLOAD=0",
        "--env=QWEN_NPU_STATE_DIR=/state",
        "--volume",
        f"{state}:/state",
        refs["engine-cpu"],
        "--model-path",
        "/models/none",
        "--speculative-algorithm",
        "NEXTN",
        "--mamba-ssm-dtype",
        "bfloat16",
        timeout=280,
    )
    passed = [line for line in done.stderr.splitlines() if "event=verify_passed" in line]
    assert len(passed) == 1, done.stderr[-3000:]
    assert f"patches={len(PATCHES)}" in passed[0]
    assert 'unused_problems="gdn-decode-state-layout=target-missing"' in passed[0], passed[0]
    assert "event=exec program=python3" in done.stderr  # then SGLang, which finds no model
    # The state file says what the line says: the MTP-on patches applied, the decode patch's
    # target missing (and not used by this mode), never "upstream-fixed" from SGLang's CPU kernel.
    said = dict(kv.split("=") for kv in passed[0].split('states="')[1].split('"')[0].split(","))
    recorded = json.loads((state / "state.json").read_text())["patches"]
    assert {name: entry["state"] for name, entry in recorded.items()} == said
    assert set(said) == {p.name for p in PATCHES}
    assert said.pop("gdn-decode-state-layout") == "target-missing"
    assert set(said.values()) <= set(OK_STATES)


def test_home_and_the_cann_log_path_are_writable_for_any_uid(
    refs: dict[str, str], engine_image: Any
) -> None:
    code = (
        "import os, pathlib\n"
        "for key in ('ASCEND_PROCESS_LOG_PATH', 'TRITON_CACHE_DIR', 'ASCEND_WORK_PATH'):\n"
        "    d = pathlib.Path(os.environ[key]); d.mkdir(parents=True); (d / 'x').write_text('x')\n"
        "print(os.environ['HOME'], os.getcwd())\n"
    )
    done = podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--user",
        "4242:4242",
        refs["engine-cpu"],
        "python3",
        "-c",
        code,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["/var/lib/qwen-npu/home", "/var/lib/qwen-npu/home"]


def test_pth_hook_inside_the_engine_image(
    repo: Path, refs: dict[str, str], engine_image: Any
) -> None:
    """The engine Dockerfile's own .pth build check, run again in the built image."""
    final = parse(repo / "docker" / "engine.Dockerfile").stage("engine")
    (code,) = [
        c
        for inst in final.all("RUN")
        for c in re.findall(r'python3 -c "([^"]*)"', inst.args)
        if "*.pth" in c
    ]
    done = _run(refs["engine-cpu"], "python3", "-c", code)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "qwen_npu_patches.pth" in done.stdout
    # And the hook is live in a fresh interpreter of the image.
    check = (
        "from qwen_npu.patches import hook; assert hook.installed(); print('hook', hook.__file__)"
    )
    done = _run(refs["engine-cpu"], "python3", "-c", check)
    assert done.returncode == 0 and "/opt/venv/" in done.stdout, done.stdout + done.stderr


def test_entrypoint_is_pid_1_under_tini_forwards_sigterm_and_keeps_the_status(
    refs: dict[str, str], engine_image: Any, tmp_path: Path
) -> None:
    name = _name("engine")
    child = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))\n"
        "print('child-ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    log = tmp_path / "podman-run.log"
    cmd = [
        "podman",
        "run",
        "--name",
        name,
        "--network",
        "none",
        refs["engine-cpu"],
        "python3",
        "-c",
        child,
    ]
    container = processes.start(cmd, log=log, env={"CONTAINERS_CONF": _conf()})
    try:
        processes.wait_until(
            lambda: "child-ready" in processes.log_tail(log),
            what="the child",
            proc=container,
            log=log,
        )
        pid1 = podman("exec", name, "cat", "/proc/1/cmdline").stdout.split("\0")
        assert Path(pid1[0]).name == "tini" and pid1[1:3] == [
            "--",
            "/usr/local/bin/qwen-npu-entrypoint",
        ]
        stopped = podman("stop", "--time", str(STOP_GRACE_S), name, timeout=STOP_GRACE_S + 60)
        assert stopped.returncode == 0, stopped.stderr
        assert container.wait(timeout=60) == 42, processes.log_tail(log)
    finally:
        processes.stop(container)
        remove_container(name)
    assert _run(refs["engine-cpu"], "python3", "-c", "raise SystemExit(7)").returncode == 7


def test_npu_count_check_in_the_image(refs: dict[str, str], engine_image: Any) -> None:
    """No NPU here: two allocated but none seen fails before SGLang starts; two runtime ids pass."""
    done = _run(
        refs["engine-cpu"],
        "--model-path",
        "/models/x",
        env={"QWEN_NPU_EXPECTED_NPUS": "2", "ASCEND_VISIBLE_DEVICES": "4,5"},
    )
    assert done.returncode == 3, done.stderr
    errors = [line for line in done.stderr.splitlines() if "level=ERROR" in line]
    assert len(errors) == 1 and "visible=0 expected=2" in errors[0], done.stderr
    assert "event=exec" not in done.stderr

    done = _run(
        refs["engine-cpu"],
        "--help",
        env={
            "QWEN_NPU_EXPECTED_NPUS": "2",
            "ASCEND_RT_VISIBLE_DEVICES": "0,1",
            "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",  # SGLang's CPU path: no torch_npu stand-in
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "event=npu_count_ok visible=2 expected=2" in done.stderr
    assert "--model-path" in done.stdout  # SGLang's own launch_server usage


# ------------------------------------------------------------------------------------ metadata


def _labels(dockerfile: Dockerfile, stage: str, values: dict[str, str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for inst in dockerfile.stage(stage).all("LABEL"):
        labels.update(key_values(inst.args))
    return {k: expand(v, values) for k, v in labels.items()}


def test_chart_image_references_are_the_built_images(
    refs: dict[str, str], sidecar_image: Any, engine_image: Any
) -> None:
    images = chart_images()
    sidecar = f"{images['sidecar']['repository']}:{images['sidecar']['tag']}"
    engine = f"{images['engine']['repository']}:{images['engine']['tag']}"
    assert sidecar == refs["sidecar"] and sidecar in _tags(sidecar_image)
    assert engine == refs["engine"]
    assert f"{engine}-cpu-standin" in _tags(engine_image)


def _tags(image: dict[str, Any]) -> list[str]:
    return [str(t).removeprefix("localhost/") for t in image.get("RepoTags") or []]


def _config(image: dict[str, Any]) -> dict[str, Any]:
    config = image["Config"]
    assert isinstance(config, dict)
    return config


def _config_with_the_dockerfiles_labels(
    image: dict[str, Any], dockerfile: Dockerfile, stage: str, values: dict[str, str]
) -> dict[str, Any]:
    """The image's config, once every label the Dockerfile's stage sets (the build's source and
    revision aside) is checked to be on it with the value the versions file gives."""
    expected = _labels(dockerfile, stage, {"SOURCE_URL": "", "VCS_REF": ""} | values)
    config = _config(image)
    for key, value in expected.items():
        if key not in ("org.opencontainers.image.source", "org.opencontainers.image.revision"):
            assert config["Labels"].get(key) == value, key
    return config


def test_sidecar_metadata_is_the_dockerfiles_and_the_versions_files(
    repo: Path, versions: dict[str, str], sidecar_image: dict[str, Any]
) -> None:
    dockerfile = parse(repo / "docker" / "sidecar.Dockerfile")
    config = _config_with_the_dockerfiles_labels(sidecar_image, dockerfile, "sidecar", versions)
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == versions["QWEN_NPU_VERSION"]
    assert labels["org.opencontainers.image.revision"] not in ("", "unknown")
    final = dockerfile.stage("sidecar")
    (user,) = final.all("USER")
    assert config["User"] == user.args == "10001:10001"
    # no port in the image: the package's default or the chart's value (qwen_npu/ports.py)
    assert not final.all("EXPOSE") and not config.get("ExposedPorts")
    env = dict(item.split("=", 1) for item in config["Env"])
    assert "QWEN_NPU_SIDECAR_PORT" not in env and env["PYTHONDONTWRITEBYTECODE"] == "1"
    (entry,) = final.all("ENTRYPOINT")
    assert config["Entrypoint"] == entry.exec_form()
    (check,) = final.all("HEALTHCHECK")
    health = sidecar_image.get("Healthcheck") or config.get("Healthcheck")
    assert health, "the HEALTHCHECK was dropped (build with --format docker)"
    assert health["Test"] == ["CMD", *(check.exec_form() or [])]
    assert health["Interval"] == 15 * 10**9 and health["Retries"] == 3


def test_engine_metadata_is_the_dockerfiles_and_the_versions_files(
    repo: Path, versions: dict[str, str], engine_image: dict[str, Any]
) -> None:
    dockerfile = parse(repo / "docker" / "engine.Dockerfile")
    values = {"CHIP": "910b", "ENGINE_FLAVOUR": "cpu"} | versions
    config = _config_with_the_dockerfiles_labels(engine_image, dockerfile, "engine", values)
    labels = config["Labels"]
    assert labels["io.qwen-npu.flavour"] == "cpu"
    assert labels["io.qwen-npu.sglang.version"] == versions["SGLANG_VERSION"]
    # The cpu flavour names its own base, not the CANN image.
    assert labels["org.opencontainers.image.base.name"] == (
        f"python:{versions['ENGINE_PYTHON_VERSION']}-slim-{versions['SIDECAR_DEBIAN_RELEASE']}"
    )
    final = dockerfile.stage("engine")
    defaults = {k: v or "" for k, v in final.arg_defaults().items()}
    (user,) = final.all("USER")
    assert config["User"] == expand(user.args, defaults) == "1000:1000"
    assert not config.get("ExposedPorts")  # SGLang's --port, rendered by the chart
    assert config["Entrypoint"] == ["/usr/local/bin/qwen-npu-entrypoint"]
    assert config["Cmd"] == ["--help"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["BASH_ENV"] == "/usr/local/lib/qwen-npu/cann-env.sh"
    assert "SGLANG_SET_CPU_AFFINITY" not in env and env["HOME"] == "/var/lib/qwen-npu/home"
    assert env["PATH"].startswith("/opt/venv/bin:")
