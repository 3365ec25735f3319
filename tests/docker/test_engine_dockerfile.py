"""The engine Dockerfile read as BuildKit would: base image, pins, stages, verify step, .pth hook,
labels, user, entrypoint. Every expected value comes from docker/versions.env."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import pytest

from .dockerfile_parse import Dockerfile, Stage, expand, key_values, parse

# The components whose pin the engine image must take from the versions file.
ENGINE_PINS = [
    "QWEN_NPU_VERSION",
    "SGLANG_VERSION",
    "CANN_BASE_IMAGE",
    "CANN_VERSION",
    "ENGINE_PYTHON_VERSION",
    "NPU_TORCH_VERSION",
    "NPU_TORCHVISION_VERSION",
    "TORCH_NPU_VERSION",
    "TRITON_ASCEND_VERSION",
    "PYBIND11_VERSION",
    "MEMFABRIC_HYBRID_VERSION",
    "MEMFABRIC_ZBAL_VERSION",
    "SGL_KERNEL_NPU_VERSION",
    "TINI_APT_VERSION",
]
# What no RUN of the final stage may do: fetch, compile or install Python packages.
BUILD_ONLY = ["pip install", "git clone", "curl ", "wget ", "build-essential", "cmake", "gcc"]


@pytest.fixture(scope="module")
def engine(repo: Path) -> Dockerfile:
    return parse(repo / "docker" / "engine.Dockerfile")


def test_every_pin_is_an_arg_whose_default_is_the_versions_file(
    engine: Dockerfile, versions: dict[str, str]
) -> None:
    defaults = engine.every_arg_default()
    for key in ENGINE_PINS:
        assert key in versions, f"docker/versions.env lost {key}"
        assert defaults.get(key) == versions[key], (
            f"engine.Dockerfile ARG {key}={defaults.get(key)!r} but docker/versions.env says "
            f"{versions[key]!r}: change both together"
        )
    # And nothing else in the Dockerfile claims a version the file does not hold.
    for key, value in defaults.items():
        if key in versions:
            assert value == versions[key], key


def test_base_image_is_the_cann_image_for_the_chip(
    engine: Dockerfile, versions: dict[str, str]
) -> None:
    base = engine.stages[0]
    assert base.name == "base-npu"
    values = {k: v or "" for k, v in engine.global_args.items()}
    values.update({k: versions[k] for k in values if k in versions})
    resolved = expand(base.base, values)
    assert resolved == (
        f"{versions['CANN_BASE_IMAGE']}:{versions['CANN_VERSION']}-910b-ubuntu22.04-"
        f"py{versions['ENGINE_PYTHON_VERSION']}"
    )
    values["CHIP"] = "a3"
    assert expand(base.base, values).endswith(
        f":{versions['CANN_VERSION']}-a3-ubuntu22.04-py{versions['ENGINE_PYTHON_VERSION']}"
    )
    # The image's own label names the base it was built from.
    labels = key_values(base.all("LABEL")[0].args)
    stage_values = {k: values[k] for k in base.arg_defaults()}
    assert expand(labels["org.opencontainers.image.base.name"], stage_values) == expand(
        base.base, values
    )


def test_stages_and_the_flavours_share_everything_after_the_stack(
    engine: Dockerfile, versions: dict[str, str]
) -> None:
    """ENGINE_FLAVOUR picks base-<flavour> and stack-<flavour>; builder and engine are shared."""
    assert [(s.name, s.base) for s in engine.stages] == [
        ("base-npu", engine.stages[0].base),
        ("base-cpu", "python:${ENGINE_PYTHON_VERSION}-slim-${SIDECAR_DEBIAN_RELEASE}"),
        ("stack-npu", "base-npu"),
        ("stack-cpu", "base-cpu"),
        ("builder", "stack-${ENGINE_FLAVOUR}"),
        ("qwen-npu", "builder"),
        ("engine", "base-${ENGINE_FLAVOUR}"),
    ]
    assert engine.global_args["ENGINE_FLAVOUR"] == "npu"  # docker build without args: the image
    # Both bases give the stages after them the same environment.
    envs = [key_values(engine.stage(n).all("ENV")[0].args) for n in ("base-npu", "base-cpu")]
    assert envs[0] == envs[1] and envs[0]["VIRTUAL_ENV"] == "/opt/venv"
    cpu_base = expand(engine.stage("base-cpu").base, versions)
    # The cpu flavour runs the engine's Python (issue 21), like the CANN base.
    assert cpu_base == f"python:{versions['ENGINE_PYTHON_VERSION']}-slim-bookworm"


def test_the_cpu_stack_installs_offline_from_the_wheels_context(engine: Dockerfile) -> None:
    """The CPU torch at the test pin, SGLang's wheel --no-deps, tests/stubs, no network."""
    stack = engine.stage("stack-cpu")
    (install,) = [i.args for i in stack.all("RUN") if "pip install" in i.args]
    assert install.startswith("--mount=type=bind,from=wheels,target=/wheels ")
    for pip in install.split("pip install")[1:]:
        assert pip.split("&&")[0].split()[:3] == ["--no-index", "--find-links", "/wheels"]
    assert '"torch==${TEST_TORCH_VERSION}" -r /tmp/sglang-cpu.txt' in install
    assert '--no-deps "sglang==${SGLANG_VERSION}"' in install
    assert "/tmp/constraints.txt" in install  # the contract the shared builder relies on
    copies = [i.args for i in stack.all("COPY")]
    assert copies == [
        "requirements/sglang-cpu.txt /tmp/sglang-cpu.txt",
        "tests/stubs/ /opt/venv/lib/python${TEST_PYTHON_VERSION}/site-packages/",
        "docker/cpu-standin/ /opt/venv/lib/python${TEST_PYTHON_VERSION}/site-packages/",
    ]


def _run_text(stage: Stage) -> str:
    return "\n".join(i.args for i in stage.all("RUN"))


def test_builder_installs_each_component_at_its_pin(engine: Dockerfile) -> None:
    runs = "\n".join(_run_text(engine.stage(n)) for n in ("stack-npu", "builder", "qwen-npu"))
    assert '"torch==${NPU_TORCH_VERSION}" "torchvision==${NPU_TORCHVISION_VERSION}"' in runs
    assert '"torch-npu==${TORCH_NPU_VERSION}"' in runs
    assert "triton_ascend-${TRITON_ASCEND_VERSION}-" in runs
    # SGLang from its git tag with the NPU project file and the srt_npu extra.
    assert '--branch "v${SGLANG_VERSION}"' in runs
    assert "pyproject_npu.toml /tmp/sglang/python/pyproject.toml" in runs
    assert '"/tmp/sglang/python[srt_npu]"' in runs
    # Every pip install after torch is held to the torch pins, or installs without dependencies.
    installs = [r.split("&&")[0] for r in runs.split("pip install")[2:]]
    assert installs and all("-c /tmp/constraints.txt" in r or "--no-deps" in r for r in installs)
    # SGLang's NPU project file: its memfabric pins rewritten to releases with cp312 wheels.
    assert '"memfabric-zbal==${MEMFABRIC_ZBAL_VERSION}"' in runs.replace("\\", "")
    assert '"memfabric-hybrid==${MEMFABRIC_HYBRID_VERSION}"' in runs.replace("\\", "")
    # qwen-npu without extras, in a stage of its own after the shared builder.
    qwen = [i.args for i in engine.stage("qwen-npu").all("RUN") if "/tmp/qwen-npu" in i.args]
    assert qwen and "[" not in qwen[0].split("/tmp/qwen-npu")[1].split()[0]


def _shell_value(stage: Stage, variable: str) -> str:
    """The text assigned to a shell variable in a RUN (`name="..."`)."""
    for inst in stage.all("RUN"):
        marker = f'{variable}="'
        if marker in inst.args:
            start = inst.args.index(marker) + len(marker)
            depth, i = 0, start
            while i < len(inst.args):
                c = inst.args[i]
                if inst.args.startswith("$(", i):
                    depth += 1
                elif c == ")" and depth:
                    depth -= 1
                elif c == '"' and not depth:
                    return inst.args[start:i]
                i += 1
    raise AssertionError(f"no {variable}= in any RUN")


def _bash_eval(expression: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        ["bash", "-c", f'arch="$(uname -m)"; py="cp312"; echo "{expression}"'],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_sgl_kernel_npu_asset_name_follows_the_release_naming(
    engine: Dockerfile, versions: dict[str, str]
) -> None:
    """The release zip is named per kernel release, torch, Python, CANN, chip and CPU arch."""
    env = {k: versions[k] for k in ENGINE_PINS} | {"CHIP": "910b"}
    asset = _bash_eval(_shell_value(engine.stage("stack-npu"), "asset"), env)
    arch = platform.machine()
    assert asset == (
        f"sgl-kernel-npu-{versions['SGL_KERNEL_NPU_VERSION']}-torch{versions['NPU_TORCH_VERSION']}"
        f"-py{versions['ENGINE_PYTHON_VERSION'].replace('.', '')}-cann{versions['CANN_VERSION']}"
        f"-910b-{arch}.zip"
    )
    wheel = _bash_eval(_shell_value(engine.stage("stack-npu"), "wheel"), env)
    assert wheel == (
        f"triton_ascend-{versions['TRITON_ASCEND_VERSION']}-cp312-cp312-manylinux_2_27_{arch}"
        f".manylinux_2_28_{arch}.whl"
    )


def test_sgl_kernel_npu_release_carries_the_state_layout_fix(versions: dict[str, str]) -> None:
    """sgl-kernel-npu PR #748 (merged 2026-08-25): releases are named YYYY.M.D[.postN]."""
    year, month, day = (int(p) for p in versions["SGL_KERNEL_NPU_VERSION"].split(".")[:3])
    assert (year, month) > (2026, 8) or (year, month, day) > (2026, 8, 25)


def test_final_stage_has_no_build_step_and_only_the_venv_from_builder(
    engine: Dockerfile,
) -> None:
    final = engine.stage("engine")
    for inst in final.all("RUN"):
        for word in BUILD_ONLY:
            assert word not in inst.args, f"engine stage line {inst.line} runs {word!r}"
    installs = [i.args for i in final.all("RUN") if "apt-get install" in i.args]
    assert len(installs) == 1 and '"tini=${TINI_APT_VERSION}"' in installs[0]
    assert "rm -rf /var/lib/apt/lists/*" in installs[0]
    from_builder = [i.args for i in final.all("COPY") if i.args.startswith("--from=")]
    assert from_builder == [
        "--from=builder /opt/venv /opt/venv",
        "--from=qwen-npu /opt/qwen-npu/ /opt/venv/",
    ]


def test_verify_step_and_pth_hook_check_run_after_the_install(engine: Dockerfile) -> None:
    final = engine.stage("engine")
    order = [(i.cmd, i.args) for i in final.instructions]
    copy_at = order.index(("COPY", "--from=qwen-npu /opt/qwen-npu/ /opt/venv/"))
    verify = [
        n
        for n, (c, a) in enumerate(order)
        if c == "RUN" and "qwen-npu patches verify --build --strict" in a
    ]
    assert verify and verify[0] > copy_at
    text = order[verify[0]][1]
    # The build's check reads the sources (no NPU at build time), through the entrypoint.
    assert "/usr/local/bin/qwen-npu-entrypoint qwen-npu patches verify --build --strict" in text
    assert "patches verify --strict" not in text  # the full check needs the NPU: engine start
    # The .pth hook: the build fails when no .pth in site-packages loads qwen_npu.
    assert "*.pth" in text and "'qwen_npu' in open(f).read()" in text and "sys.exit(" in text
    # And the installed SGLang is the pinned one; (npu) triton-ascend's backend imports.
    assert "m.version('sglang')" in text and "${SGLANG_VERSION}" in text
    assert "import triton, triton.backends.ascend" in text
    # On the engine's Python too when the stack runs another one (the cpu flavour here).
    engine_py = [a for c, a in order if c == "RUN" and "--site" in a]
    assert len(engine_py) == 1 and '"python${ENGINE_PYTHON_VERSION}" -m venv' in engine_py[0]
    assert "patches verify --build --strict --site" in engine_py[0]


def test_triton_ascend_is_reinstalled_after_the_last_install(engine: Dockerfile) -> None:
    """Nothing installed after it may leave upstream triton over triton-ascend (issue 22)."""
    builder = engine.stage("builder")
    runs = [i.args for i in builder.all("RUN")]
    last_install = max(n for n, r in enumerate(runs) if "sglang-router==" in r)
    (fix,) = [n for n, r in enumerate(runs) if "pip uninstall -y triton" in r]
    assert fix > last_install
    text = runs[fix]
    assert "pip install --no-cache-dir --no-deps --force-reinstall /opt/triton-ascend/*.whl" in text
    assert "'upstream triton is installed over triton-ascend' if 'triton' in d" in text
    assert "m.version('pybind11')" in text and "m.version('triton-ascend')" in text
    # No later stage installs anything with dependencies into the venv.
    for later in ("qwen-npu", "engine"):
        for inst in engine.stage(later).all("RUN"):
            for pip in inst.args.split("pip install")[1:]:
                assert "-c /tmp/constraints.txt" in pip.split("&&")[0], (later, inst.line)
    stack = _run_text(engine.stage("stack-npu"))
    assert '"pybind11==${PYBIND11_VERSION}"' in stack
    assert 'pip install --no-deps "/opt/triton-ascend/${wheel}"' in stack


def test_the_image_bakes_no_cpu_affinity_and_home_is_writable_for_any_uid(
    engine: Dockerfile,
) -> None:
    final = engine.stage("engine")
    env: dict[str, str] = {}
    for inst in final.all("ENV"):
        env.update(key_values(inst.args))
    assert "SGLANG_SET_CPU_AFFINITY" not in env  # the chart's engine.cpuAffinity
    home = env["HOME"]
    for key in (
        "XDG_CACHE_HOME",
        "ASCEND_PROCESS_LOG_PATH",
        "ASCEND_CACHE_PATH",
        "ASCEND_WORK_PATH",
        "TRITON_CACHE_DIR",
    ):
        assert env[key].startswith(home + "/"), key
    (workdir,) = final.all("WORKDIR")
    assert workdir.args == home  # CANN writes kernel_meta and fusion_result.json to the cwd
    made = [i.args for i in final.all("RUN") if f"install -d -m 1777 {home}" in i.args]
    assert made, "HOME must be created world-writable (sticky), like /tmp"


def test_cann_environment_for_every_process(engine: Dockerfile) -> None:
    final = engine.stage("engine")
    env: dict[str, str] = {}
    for inst in final.all("ENV"):
        env.update(key_values(inst.args))
    scripts = env["QWEN_NPU_CANN_ENV_SCRIPTS"].split()
    assert scripts == [
        "/usr/local/Ascend/ascend-toolkit/set_env.sh",
        "/usr/local/Ascend/cann-${CANN_VERSION}/share/info/ascendnpu-ir/bin/set_env.sh",
        "/usr/local/Ascend/nnal/atb/set_env.sh",
    ]
    assert env["BASH_ENV"] == env["QWEN_NPU_CANN_ENV_FILE"] == "/usr/local/lib/qwen-npu/cann-env.sh"
    copies = {i.args.split()[-1]: i.args.split()[:-1] for i in final.all("COPY")}
    assert copies["/usr/local/lib/qwen-npu/cann-env.sh"] == ["--chmod=0644", "docker/cann-env.sh"]
    assert copies["/usr/local/bin/qwen-npu-entrypoint"] == [
        "--chmod=0755",
        "docker/engine-entrypoint.sh",
    ]
    assert env["PATH"].startswith("/opt/venv/bin:")


def test_entrypoint_user_port_and_labels(engine: Dockerfile, versions: dict[str, str]) -> None:
    final = engine.stage("engine")
    (entry,) = final.all("ENTRYPOINT")
    assert entry.exec_form() == ["/usr/local/bin/qwen-npu-entrypoint"]
    assert final.instructions[-1].cmd == "CMD"
    (user,) = final.all("USER")
    defaults = final.arg_defaults()
    uid = expand(user.args.split(":")[0], {k: v or "" for k, v in defaults.items()})
    assert uid.isdigit() and int(uid) != 0, "the engine runs as a non-root user by default"
    assert [i.args for i in final.all("EXPOSE")] == ["30000"]

    labels: dict[str, str] = {}
    for inst in final.all("LABEL"):
        labels.update(key_values(inst.args))
    values = {k: versions.get(k, v or "") for k, v in defaults.items()}
    resolved = {k: expand(v, values) for k, v in labels.items()}
    assert resolved["org.opencontainers.image.version"] == versions["QWEN_NPU_VERSION"]
    assert "org.opencontainers.image.source" in resolved
    assert "org.opencontainers.image.revision" in resolved
    component = {
        "io.qwen-npu.sglang.version": "SGLANG_VERSION",
        "io.qwen-npu.cann.version": "CANN_VERSION",
        "io.qwen-npu.python.version": "ENGINE_PYTHON_VERSION",
        "io.qwen-npu.torch.version": "NPU_TORCH_VERSION",
        "io.qwen-npu.torch-npu.version": "TORCH_NPU_VERSION",
        "io.qwen-npu.triton-ascend.version": "TRITON_ASCEND_VERSION",
        "io.qwen-npu.sgl-kernel-npu.version": "SGL_KERNEL_NPU_VERSION",
    }
    for label, key in component.items():
        assert resolved[label] == versions[key], label
