"""The sidecar Dockerfile: slim base from the versions file, qwen-npu[sidecar] pinned by the
constraints file, no torch, non-root, read-only friendly, a curl-free HEALTHCHECK."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .dockerfile_parse import Dockerfile, expand, key_values, parse


@pytest.fixture(scope="module")
def sidecar(repo: Path) -> Dockerfile:
    return parse(repo / "docker" / "sidecar.Dockerfile")


def test_slim_python_base_from_the_versions_file(
    sidecar: Dockerfile, versions: dict[str, str]
) -> None:
    values = {k: versions[k] for k in sidecar.global_args}
    bases = {expand(stage.base, values) for stage in sidecar.stages}
    assert bases == {
        f"python:{versions['SIDECAR_PYTHON_VERSION']}-slim-{versions['SIDECAR_DEBIAN_RELEASE']}"
    }
    assert [s.name for s in sidecar.stages] == ["builder", "sidecar"]


def test_installs_the_sidecar_extra_held_by_the_constraints_file(sidecar: Dockerfile) -> None:
    runs = " ".join(i.args for i in sidecar.stage("builder").all("RUN"))
    assert (
        '"${wheel}[${EXTRAS}]"' in runs
    )  # EXTRAS: sidecar by default, sidecar,fetch for image-fetch
    args = " ".join(i.args for i in sidecar.stage("builder").all("ARG"))
    assert "EXTRAS=sidecar" in args.split()
    assert "-c /src/docker/sidecar-constraints.txt" in runs
    assert "pip uninstall -y pip setuptools" in runs
    final = sidecar.stage("sidecar")
    assert not final.all("RUN") or all("pip" not in i.args for i in final.all("RUN"))
    assert [i.args for i in final.all("COPY")] == ["--from=builder /opt/venv /opt/venv"]


def test_no_torch_or_sglang_anywhere(repo: Path, sidecar: Dockerfile) -> None:
    steps = [
        i.args.lower() for s in sidecar.stages for i in s.instructions if i.cmd in ("RUN", "COPY")
    ]
    for step in steps:
        assert "torch" not in step and "sglang" not in step, step
    pins = (repo / "docker" / "sidecar-constraints.txt").read_text().lower()
    for name in ("torch", "sglang", "numpy", "triton"):
        assert not re.search(rf"^{name}\b", pins, re.M), name


def test_non_root_read_only_friendly_with_a_python_healthcheck(sidecar: Dockerfile) -> None:
    final = sidecar.stage("sidecar")
    (user,) = final.all("USER")
    uid, _, gid = user.args.partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    env: dict[str, str] = {}
    for inst in final.all("ENV"):
        env.update(key_values(inst.args))
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert "QWEN_NPU_SIDECAR_PORT" not in env  # the package's default (qwen_npu/ports.py)
    (check,) = final.all("HEALTHCHECK")
    probe = check.exec_form()
    assert probe and probe[:2] == ["python", "-c"] and "/livez" in probe[2]
    assert "curl" not in check.args and "wget" not in check.args
    (entry,) = final.all("ENTRYPOINT")
    assert entry.exec_form() == ["qwen-npu", "sidecar"]
    assert not final.all("EXPOSE")  # no port number in the Dockerfile: the package's or the chart's
