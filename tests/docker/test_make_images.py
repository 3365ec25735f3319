"""`make image`, `make image-sidecar`, `make push`, run for real with a stand-in `docker` first on
PATH: one line and a non-zero exit without an engine; the right build command line with one."""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import make

from .dockerfile_parse import parse

RECORDER = """#!/usr/bin/env bash
# Stand-in docker: records each call, one line of shell words; `info` answers as DOCKER_UP says.
printf '%q ' "$@" >> "$DOCKER_LOG"; echo >> "$DOCKER_LOG"
if [ "$1" = info ] && [ "${DOCKER_UP:-0}" != 1 ]; then
  echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2; exit 1
fi
exit 0
"""


@pytest.fixture()
def docker_stub(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "docker"
    stub.write_text(RECORDER)
    stub.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "DOCKER_LOG": str(tmp_path / "docker.log"),
        "HOME": str(tmp_path),
    }


#: Stand-in release digests: docker/versions.env leaves them empty until `make image-digests` runs
#: where the release downloads are reachable, and `make image` refuses to start without them.
DIGESTS = [
    f"{key}={n:064x}"
    for n, key in enumerate(
        [
            "TRITON_ASCEND_SHA256_X86_64",
            "TRITON_ASCEND_SHA256_AARCH64",
            "SGL_KERNEL_NPU_SHA256_910B_X86_64",
            "SGL_KERNEL_NPU_SHA256_910B_AARCH64",
            "SGL_KERNEL_NPU_SHA256_A3_X86_64",
            "SGL_KERNEL_NPU_SHA256_A3_AARCH64",
        ],
        start=1,
    )
]


def calls(env: dict[str, str]) -> list[list[str]]:
    log = Path(env["DOCKER_LOG"])
    return [shlex.split(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("target", ["image", "image-sidecar", "push"])
def test_without_a_docker_engine_one_line_and_failure(
    repo: Path, docker_stub: dict[str, str], target: str
) -> None:
    done = make(repo, docker_stub, target, *DIGESTS)
    assert done.returncode != 0
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert [line for line in lines if not line.startswith("make: ***")] == [
        f"make {target}: no Docker engine answers ('docker info' failed); run it on a machine "
        "with Docker, see docs/images.md"
    ]
    assert calls(docker_stub) == [["info"]]  # nothing was built or pushed


def test_a_bad_platform_or_chip_is_refused_before_docker(
    repo: Path, docker_stub: dict[str, str]
) -> None:
    done = make(repo, docker_stub, "image", "PLATFORM=linux/s390x")
    assert done.returncode != 0 and "PLATFORM=linux/s390x is not one of" in done.stdout
    done = make(repo, docker_stub, "image", "CHIP=910c", "PLATFORM=linux/arm64")
    assert done.returncode != 0 and "CHIP=910c is not one of: 910b a3" in done.stdout
    assert calls(docker_stub) == []


def _build_args(argv: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for flag, value in itertools.pairwise(argv):
        if flag == "--build-arg":
            key, _, val = value.partition("=")
            found[key] = val
    return found


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_image_builds_the_engine_with_every_pin_from_the_versions_file(
    repo: Path, docker_stub: dict[str, str], versions: dict[str, str]
) -> None:
    env = docker_stub | {"DOCKER_UP": "1"}
    done = make(repo, env, "image", "PLATFORM=linux/arm64", *DIGESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    info, build = calls(env)
    assert info == ["info"] and build[:1] == ["build"]
    assert _flag(build, "--platform") == "linux/arm64"
    assert _flag(build, "-f") == "docker/engine.Dockerfile"
    assert _flag(build, "-t") == f"ghcr.io/qwen-npu/engine:{versions['QWEN_NPU_VERSION']}"
    assert build[-1] == "."
    args = _build_args(build)
    declared = parse(repo / "docker" / "engine.Dockerfile").every_arg()
    expected = {k: v for k, v in versions.items() if k in declared}
    expected |= {k: v for k, _, v in (d.partition("=") for d in DIGESTS)}  # the command line's
    assert {k: args[k] for k in expected} == expected
    assert args["CHIP"] == "910b"


@pytest.mark.parametrize(
    ("target", "override", "named"),
    [
        ("image", "CANN_VERSION=", "CANN_VERSION"),
        ("image", "SGL_KERNEL_NPU_SHA256_A3_X86_64=", "SGL_KERNEL_NPU_SHA256_A3_X86_64"),
        ("image-sidecar", "SIDECAR_DEBIAN_RELEASE=", "SIDECAR_DEBIAN_RELEASE"),
    ],
)
def test_an_empty_pin_stops_make_before_docker_naming_it(
    repo: Path, docker_stub: dict[str, str], target: str, override: str, named: str
) -> None:
    """The Dockerfiles carry no defaults: an empty key of docker/versions.env is refused first."""
    env = docker_stub | {"DOCKER_UP": "1"}
    done = make(repo, env, target, "CHIP=a3", "PLATFORM=linux/amd64", *DIGESTS, override)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith(f"make {target}:")]
    assert line.startswith(f"make {target}: {named} empty in docker/versions.env")
    assert calls(env) == []


def test_the_versions_file_leaves_the_digests_to_make_image_digests(
    repo: Path, docker_stub: dict[str, str], versions: dict[str, str]
) -> None:
    """Not filled in here (no release download is reachable): say so, do not invent digests."""
    digest_keys = [k for k in versions if "_SHA256_" in k]
    assert len(digest_keys) == 6
    for key in digest_keys:
        assert versions[key] == "" or len(versions[key]) == 64, key
    if not all(versions[k] for k in digest_keys):
        env = docker_stub | {"DOCKER_UP": "1"}
        done = make(repo, env, "image", "PLATFORM=linux/amd64")
        assert done.returncode == 2 and "make image-digests prints" in done.stdout


def test_image_for_a3_with_registry_and_tag(repo: Path, docker_stub: dict[str, str]) -> None:
    env = docker_stub | {"DOCKER_UP": "1"}
    done = make(
        repo,
        env,
        "image",
        "CHIP=a3",
        "REGISTRY=reg.example:5000/ai",
        "TAG=rc1",
        "PLATFORM=linux/amd64",
        *DIGESTS,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    build = calls(env)[1]
    assert _flag(build, "-t") == "reg.example:5000/ai/engine:rc1-a3"
    assert _build_args(build)["CHIP"] == "a3"
    assert _flag(build, "--platform") == "linux/amd64"


def test_image_sidecar_and_push(
    repo: Path, docker_stub: dict[str, str], versions: dict[str, str]
) -> None:
    env = docker_stub | {"DOCKER_UP": "1"}
    assert make(repo, env, "image-sidecar", "TAG=t1", "PLATFORM=linux/amd64").returncode == 0
    build = calls(env)[1]
    assert _flag(build, "-f") == "docker/sidecar.Dockerfile"
    assert _flag(build, "-t") == "ghcr.io/qwen-npu/sidecar:t1"
    args = _build_args(build)
    for key in ("SIDECAR_PYTHON_VERSION", "SIDECAR_DEBIAN_RELEASE", "QWEN_NPU_VERSION"):
        assert args[key] == versions[key]
    assert not any("TORCH" in key or "SGLANG" in key for key in args)

    Path(env["DOCKER_LOG"]).unlink()
    assert make(repo, env, "push", "TAG=t1").returncode == 0
    assert calls(env) == [
        ["info"],
        ["push", "ghcr.io/qwen-npu/engine:t1"],
        ["push", "ghcr.io/qwen-npu/sidecar:t1"],
    ]


# ------------------------------------------------------------------ podman (make image-test)


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [
        line
        for line in (done.stdout + done.stderr).strip().splitlines()
        if not line.startswith(("make: ***", ">> "))
    ]
    assert len(lines) == 1, lines
    return lines[0]


def test_image_test_fails_in_one_line_when_podman_cannot_be_installed(
    repo: Path, docker_stub: dict[str, str]
) -> None:
    """Not root and a tool missing: no apt-get, one line naming what is missing, failure."""
    bin_dir = Path(docker_stub["PATH"].split(":")[0])
    _stub(bin_dir, "id", "echo 1000\n")
    done = make(
        repo,
        docker_stub,
        "tools-podman",
        "PODMAN_TOOLS=podman=podman qwen-npu-no-such-tool=no-such-pkg",
    )
    assert done.returncode != 0
    assert _one_line(done) == (
        "make tools-podman: qwen-npu-no-such-tool missing and installing needs root: "
        "sudo apt-get install no-such-pkg"
    )


def test_image_test_fails_in_one_line_when_podman_does_not_work(
    repo: Path, docker_stub: dict[str, str]
) -> None:
    bin_dir = Path(docker_stub["PATH"].split(":")[0])
    _stub(bin_dir, "podman", 'echo "Error: cannot set up namespace" >&2; exit 125\n')
    done = make(repo, docker_stub, "tools-podman", "PODMAN_TOOLS=bash=bash")
    assert done.returncode != 0
    line = _one_line(done)
    assert line.startswith("make tools-podman: 'podman info' fails with CONTAINERS_CONF=")
    assert line.endswith("docker/podman/containers.conf: Error: cannot set up namespace")


def test_image_test_fails_in_one_line_when_the_base_cannot_be_made(
    repo: Path, docker_stub: dict[str, str], tmp_path: Path
) -> None:
    """No stand-in base in podman's storage and no Debian mirror answering: one line."""
    bin_dir = Path(docker_stub["PATH"].split(":")[0])
    _stub(bin_dir, "podman", '[ "$1" = info ] && exit 0\nexit 1\n')  # no image exists
    _stub(bin_dir, "mmdebstrap", 'echo "E: apt-get update failed" >&2; exit 1\n')
    done = make(
        repo,
        docker_stub,
        "image-standin-base",
        "PODMAN_TOOLS=bash=bash",
        f"OUT={tmp_path / 'out'}",
        "STANDIN_MIRROR=http://127.0.0.1:9/debian",
    )
    assert done.returncode != 0
    assert _one_line(done) == (
        "make image-standin-base: the stand-in base cannot be made: mmdebstrap bookworm from "
        "http://127.0.0.1:9/debian failed (E: apt-get update failed)"
    )
