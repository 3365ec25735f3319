"""The engine Dockerfile's NPU side, which no build here runs (the CANN base, the NPU stack, the
downloads and their digests, the pins), read as BuildKit would, and its build scripts run for real.
What the CPU flavour's podman build runs (the stages after the stack, the verify step, the .pth
hook, HOME, the labels, user and entrypoint) is checked on the built image (test_podman_images.py).
Every expected value comes from docker/versions.env."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
from pathlib import Path

import pytest

from qwen_npu.log import LINE

from .dockerfile_parse import _VAR as _VAR_RE
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
    "ENGINE_NUMPY_VERSION",
    "ENGINE_PYARROW_BELOW",
    "CANN_MIN_HDK_VERSION",
]


@pytest.fixture(scope="module")
def engine(repo: Path) -> Dockerfile:
    return parse(repo / "docker" / "engine.Dockerfile")


def test_every_pin_is_an_arg_without_a_default(
    engine: Dockerfile, versions: dict[str, str]
) -> None:
    """docker/versions.env is the one source: the Dockerfile declares each pin, repeats none."""
    declared = engine.every_arg()
    defaults = engine.every_arg_default()
    for key in ENGINE_PINS:
        assert key in versions, f"docker/versions.env lost {key}"
        assert key in declared, f"engine.Dockerfile declares no ARG {key}"
    repeated = sorted(k for k in defaults if k in versions)
    assert not repeated, (
        f"engine.Dockerfile repeats docker/versions.env as ARG defaults: {repeated}"
    )


def _required(stage: Stage) -> list[str]:
    """The names the stage's first RUN hands docker/require-build-args.sh (none: [])."""
    runs = stage.all("RUN")
    if not runs or "require-build-args.sh" not in runs[0].args:
        return []
    words = runs[0].args.split("require-build-args.sh ", 2)[-1].split()
    return words[1:]


def test_each_stage_stops_first_when_a_pin_it_uses_is_empty(
    engine: Dockerfile, versions: dict[str, str]
) -> None:
    """Every versions.env ARG a stage's RUN, ENV or LABEL reads is checked by its first RUN; the
    digests are checked by the download itself (docker/engine-assets.sh)."""
    for stage in engine.stages:
        used = set()
        for inst in stage.instructions:
            if inst.cmd in ("RUN", "ENV", "LABEL"):
                used |= {m.group(1) or m.group(3) for m in re.finditer(_VAR_RE, inst.args)}
        pins = {k for k in used & set(versions) if "_SHA256_" not in k}
        # a stage's base reference already stops on what it names (the FROM markers)
        pins -= set(re.findall(r"\$\{([A-Z_]+):-", stage.base))
        # the stack-npu stage reads its digests through engine-assets.sh, by name
        assert pins <= set(_required(stage)), (stage.name, sorted(pins - set(_required(stage))))


def test_the_build_arg_check_names_the_empty_argument_and_the_versions_file(repo: Path) -> None:
    script = repo / "docker" / "require-build-args.sh"
    env = {"PATH": os.environ["PATH"], "A": "1", "B": ""}
    ok = subprocess.run(["bash", str(script), "x.Dockerfile", "A"], env=env, capture_output=True)
    assert ok.returncode == 0 and ok.stderr == b""
    bad = subprocess.run(
        ["bash", str(script), "x.Dockerfile:stage", "A", "B", "C"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    (line,) = bad.stderr.splitlines()
    assert "event=build_arg_empty dockerfile=x.Dockerfile:stage args=B,C " in line
    assert LINE.fullmatch(line)  # the one log shape (qwen_npu/log.py), at build time too
    assert "docker/versions.env" in line


def test_an_empty_base_argument_names_itself_in_the_image_reference(engine: Dockerfile) -> None:
    """FROM runs before any step: the reference itself then says what is empty."""
    empty = {k: "" for k in engine.global_args} | {"CHIP": "910b", "BASE_OS": "ubuntu22.04"}
    for stage in engine.stages[:2]:
        ref = expand(stage.base, empty)
        for name in re.findall(r"\$\{([A-Z_]+):-", stage.base):
            assert f"empty-arg-{name.lower() if name == 'CANN_BASE_IMAGE' else name}" in ref
        assert "see-docker-versions.env" in ref


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
        ("base-cpu", engine.stages[1].base),
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
    assert engine.stages[1].base.startswith("python:${ENGINE_PYTHON_VERSION:-")
    cpu_base = expand(engine.stage("base-cpu").base, versions)
    # The cpu flavour runs the engine's Python (issue 21), like the CANN base.
    assert cpu_base == f"python:{versions['ENGINE_PYTHON_VERSION']}-slim-bookworm"


def _run_text(stage: Stage) -> str:
    return "\n".join(i.args for i in stage.all("RUN"))


def test_builder_installs_each_component_at_its_pin(engine: Dockerfile) -> None:
    runs = "\n".join(_run_text(engine.stage(n)) for n in ("stack-npu", "builder", "qwen-npu"))
    assert '"torch==${NPU_TORCH_VERSION}" "torchvision==${NPU_TORCHVISION_VERSION}"' in runs
    assert '"torch-npu==${TORCH_NPU_VERSION}"' in runs
    assert "engine-assets.sh fetch triton" in runs
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


def _assets(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(repo / "docker" / "engine-assets.sh"), *args],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_sgl_kernel_npu_asset_name_follows_the_release_naming(
    repo: Path, versions: dict[str, str]
) -> None:
    """The release zip is named per kernel release, torch, Python, CANN, chip and CPU arch, as
    SGLang's NPU CI downloads it (scripts/ci/npu/npu_ci_install_dependency.sh)."""
    env = {k: versions[k] for k in ENGINE_PINS}
    arch = platform.machine()
    asset = _assets(repo, env, "name", "kernel", arch, "910b").stdout.strip()
    assert asset == (
        f"sgl-kernel-npu-{versions['SGL_KERNEL_NPU_VERSION']}-torch{versions['NPU_TORCH_VERSION']}"
        f"-py{versions['ENGINE_PYTHON_VERSION'].replace('.', '')}-cann{versions['CANN_VERSION']}"
        f"-910b-{arch}.zip"
    )
    wheel = _assets(repo, env, "name", "triton", arch, "910b").stdout.strip()
    assert wheel == (
        f"triton_ascend-{versions['TRITON_ASCEND_VERSION']}-cp312-cp312-manylinux_2_27_{arch}"
        f".manylinux_2_28_{arch}.whl"
    )
    # One digest key per chip and architecture, each a key of docker/versions.env.
    for kind, chips in (("triton", ["910b"]), ("kernel", ["910b", "a3"])):
        for chip in chips:
            for cpu in ("x86_64", "aarch64"):
                key = _assets(repo, env, "key", kind, cpu, chip).stdout.strip()
                assert key in versions, key


def test_a_download_is_installed_only_with_its_pinned_digest(
    repo: Path, versions: dict[str, str], tmp_path: Path
) -> None:
    """engine-assets.sh fetch, against a stand-in release page (file://): the right bytes pass, a
    wrong digest or an empty one stops the build naming the versions.env key."""
    arch = platform.machine()
    env = {k: versions[k] for k in ENGINE_PINS} | {"CHIP": "a3", "ENGINE_ASSETS_ARCH": arch}
    name = _assets(repo, env, "name", "kernel", arch, "a3").stdout.strip()
    release = tmp_path / "release" / versions["SGL_KERNEL_NPU_VERSION"]
    release.mkdir(parents=True)
    (release / name).write_bytes(b"the pinned zip")
    digest = hashlib.sha256(b"the pinned zip").hexdigest()
    key = f"SGL_KERNEL_NPU_SHA256_A3_{arch.upper()}"
    env["SGL_KERNEL_NPU_URL"] = f"file://{tmp_path / 'release'}"

    ok = _assets(repo, env | {key: digest}, "fetch", "kernel", str(tmp_path / "out"))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == str(tmp_path / "out" / name)
    assert f"event=asset_verified asset={name} sha256={digest}" in ok.stderr

    wrong = _assets(repo, env | {key: "0" * 64}, "fetch", "kernel", str(tmp_path / "bad"))
    assert wrong.returncode == 4
    assert f"event=asset_digest_mismatch asset={name} key={key} " in wrong.stderr
    assert not (tmp_path / "bad" / name).exists()

    empty = _assets(repo, env | {key: ""}, "fetch", "kernel", str(tmp_path / "none"))
    assert empty.returncode == 2
    (line,) = empty.stderr.splitlines()
    assert all(LINE.fullmatch(x) for x in (line, *ok.stderr.splitlines()))
    assert f"event=asset_digest_missing asset={name} key={key} " in line
    assert "docker/versions.env" in line and "make image-digests" in line


def test_the_stack_installs_the_checked_downloads(engine: Dockerfile) -> None:
    stack = _run_text(engine.stage("stack-npu"))
    assert "bash /tmp/engine-assets.sh fetch triton /opt/triton-ascend >/dev/null" in stack
    assert 'zip="$(bash /tmp/engine-assets.sh fetch kernel /tmp)"' in stack
    assert "curl " not in stack  # every download goes through the digest check
    for key in ("TRITON_ASCEND_SHA256_X86_64", "SGL_KERNEL_NPU_SHA256_A3_AARCH64"):
        assert key in engine.stage("stack-npu").arg_defaults()


def test_numpy_and_pyarrow_are_held_where_sglangs_npu_ci_holds_them(
    engine: Dockerfile, versions: dict[str, str]
) -> None:
    stack = _run_text(engine.stage("stack-npu"))
    assert (
        '"numpy==${ENGINE_NUMPY_VERSION}"' in stack and '"pyarrow<${ENGINE_PYARROW_BELOW}"' in stack
    )
    assert stack.index('"numpy==${ENGINE_NUMPY_VERSION}"') < stack.index("> /tmp/constraints.txt")
    assert (versions["ENGINE_NUMPY_VERSION"], versions["ENGINE_PYARROW_BELOW"]) == ("1.26.4", "26")
    # and the builder fails when anything moved numpy off it
    builder = _run_text(engine.stage("builder"))
    assert "m.version('numpy') == '${ENGINE_NUMPY_VERSION}'" in builder


def test_sgl_kernel_npu_release_carries_the_state_layout_fix(versions: dict[str, str]) -> None:
    """sgl-kernel-npu PR #748 (merged 2026-08-25): releases are named YYYY.M.D[.postN]."""
    year, month, day = (int(p) for p in versions["SGL_KERNEL_NPU_VERSION"].split(".")[:3])
    assert (year, month) > (2026, 8) or (year, month, day) > (2026, 8, 25)


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
    assert "pip install --no-deps /opt/triton-ascend/*.whl" in stack


def test_make_image_digests_prints_every_key_from_the_downloads(
    repo: Path, versions: dict[str, str], tmp_path: Path
) -> None:
    """`digests` (behind `make image-digests`) against a stand-in release page: one KEY=sha256
    line per versions.env digest key, each the sha256 of the file it names."""
    env = {k: versions[k] for k in ENGINE_PINS}
    triton = tmp_path / "triton" / f"v{versions['TRITON_ASCEND_VERSION']}"
    kernel = tmp_path / "kernel" / versions["SGL_KERNEL_NPU_VERSION"]
    triton.mkdir(parents=True)
    kernel.mkdir(parents=True)
    expected = {}
    for cpu in ("x86_64", "aarch64"):
        name = _assets(repo, env, "name", "triton", cpu, "910b").stdout.strip()
        (triton / name).write_bytes(name.encode())
        expected[f"TRITON_ASCEND_SHA256_{cpu.upper()}"] = hashlib.sha256(name.encode()).hexdigest()
        for chip in ("910b", "a3"):
            name = _assets(repo, env, "name", "kernel", cpu, chip).stdout.strip()
            (kernel / name).write_bytes(name.encode())
            key = f"SGL_KERNEL_NPU_SHA256_{chip.upper()}_{cpu.upper()}"
            expected[key] = hashlib.sha256(name.encode()).hexdigest()
    urls = {
        "TRITON_ASCEND_URL": f"file://{tmp_path / 'triton'}",
        "SGL_KERNEL_NPU_URL": f"file://{tmp_path / 'kernel'}",
    }
    done = _assets(repo, env | urls, "digests")
    assert done.returncode == 0, done.stderr
    printed = dict(line.split("=", 1) for line in done.stdout.splitlines())
    assert printed == expected
    assert set(printed) == {k for k in versions if "_SHA256_" in k}


def test_image_digests_names_per_chip_and_arch_what_the_release_has_and_a_404(
    repo: Path, versions: dict[str, str], tmp_path: Path
) -> None:
    """`make image-digests` (engine-assets.sh digests) against a stand-in release server on
    loopback that lacks one asset (sgl-kernel-npu's 910b zip for aarch64, as a release may): every
    other asset gets its KEY=sha256 line, the missing one a `# KEY:` line naming the file and the
    404, and the run ends in one line and exit 3, not at the first miss (issue 41)."""
    import http.server
    import threading
    from functools import partial

    env = {k: versions[k] for k in ENGINE_PINS}
    root = tmp_path / "site"
    expected: dict[str, str] = {}
    absent = ("kernel", "aarch64", "910b")
    for kind, chips in (("triton", [""]), ("kernel", ["910b", "a3"])):
        for arch in ("x86_64", "aarch64"):
            for chip in chips:
                name = _assets(repo, env, "name", kind, arch, chip or "910b").stdout.strip()
                key = _assets(repo, env, "key", kind, arch, chip or "910b").stdout.strip()
                if (kind, arch, chip) == absent:
                    missing = (key, name)
                    continue
                folder = root / (
                    f"triton/v{versions['TRITON_ASCEND_VERSION']}"
                    if kind == "triton"
                    else f"kernel/{versions['SGL_KERNEL_NPU_VERSION']}"
                )
                folder.mkdir(parents=True, exist_ok=True)
                data = f"{kind} {arch} {chip}".encode()
                (folder / name).write_bytes(data)
                expected[key] = hashlib.sha256(data).hexdigest()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=root))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        env |= {"TRITON_ASCEND_URL": f"{base}/triton", "SGL_KERNEL_NPU_URL": f"{base}/kernel"}
        done = _assets(repo, env, "digests")
        (root / "kernel" / versions["SGL_KERNEL_NPU_VERSION"] / missing[1]).write_bytes(b"now")
        complete = _assets(repo, env, "digests")
    finally:
        server.shutdown()
        thread.join()
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    found = dict(x.split("=", 1) for x in done.stdout.splitlines() if not x.startswith("#"))
    assert found == expected and len(found) == 5
    (comment,) = [x for x in done.stdout.splitlines() if x.startswith("#")]
    url = f"{base}/kernel/{versions['SGL_KERNEL_NPU_VERSION']}/{missing[1]}"
    assert comment == f"# {missing[0]}: no {missing[1]} in the release (HTTP 404 at {url})"
    warning, error = done.stderr.splitlines()
    assert all(LINE.fullmatch(x) for x in (warning, error))
    assert f"event=asset_missing asset={missing[1]} chip=910b arch=aarch64 status=404 " in warning
    assert "event=assets_missing count=1 " in error
    assert complete.returncode == 0, complete.stderr
    assert len(complete.stdout.splitlines()) == 6 and complete.stderr == ""
