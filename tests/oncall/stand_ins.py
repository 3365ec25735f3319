"""Recording stand-ins for `helm` and `kubectl`, put first on PATH by the on-call tests.

Why it exists: no cluster runs here, so the tests check the exact command lines the make targets
build. Each call is appended to a JSON-lines log; `helm get values` answers from a file, `helm get
manifest <release>` with the chart rendered for that release (`manifest`), and any command can be
told to fail. With ONCALL_EXEC_LOCAL=1, `kubectl exec POD -c C -- CMD...` runs CMD
on this machine (the sidecar's readiness check, against a real sidecar on 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

from conftest import make

# The interpreter behind this venv, started without site: a stand-in call costs milliseconds
# (a pyenv shim or the venv's .pth hooks would cost a few hundred).
PYTHON = os.path.realpath(getattr(sys, "_base_executable", sys.executable))

STAND_IN = """#!{python} -S
import json, os, subprocess, sys
name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
with open(os.environ["ONCALL_LOG"], "a") as log:
    log.write(json.dumps([name, *args]) + "\\n")
words = " ".join(args)
fail = os.environ.get("ONCALL_FAIL", "")
if fail and fail in name + " " + words:
    print(name + ": simulated failure", file=sys.stderr)
    sys.exit(1)
if name == "helm" and args[:2] == ["get", "values"]:
    path = os.environ.get("HELM_VALUES_FILE", "")
    sys.stdout.write(open(path).read() if path else "{}\\n")
elif name == "helm" and args[:2] == ["get", "manifest"]:
    path = os.path.join(os.environ["HELM_MANIFEST_DIR"], args[2] + ".yaml")
    if not os.path.exists(path):
        print("Error: release: not found", file=sys.stderr)
        sys.exit(1)
    sys.stdout.write(open(path).read())
elif name == "kubectl" and "get" in args and "pod" in args and "jsonpath" in words:
    sys.stdout.write(os.environ.get("ONCALL_POD", "qwen-npu-engine-7d9f-abcde"))
elif name == "kubectl" and "exec" in args and os.environ.get("ONCALL_EXEC_LOCAL") == "1":
    cmd = args[args.index("--") + 1:]
    if cmd[0] == "python3":
        cmd[0] = sys.executable
    sys.exit(subprocess.run(cmd).returncode)
"""


@cache
def _manifest(release: str, values_json: str) -> str:
    from tools import chart

    rendered = chart.render(json.loads(values_json), name=release)
    return "".join(
        f"---\n# Source: {path}\n{text.strip()}\n"
        for path, text in sorted(rendered.items())
        if text.strip() and not path.endswith("NOTES.txt")
    )


def manifest(release: str, values: dict[str, Any] | None = None) -> str:
    """What `helm get manifest <release>` prints for the chart rendered with `values`."""
    return _manifest(release, json.dumps(values or {}, sort_keys=True))


def install(directory: Path, releases: dict[str, dict[str, Any]] | None = None) -> dict[str, str]:
    """Write `helm` and `kubectl` into directory; return the environment that uses them.

    `releases`: release name -> chart values whose render `helm get manifest` answers (default:
    release qwen-npu with the chart's defaults).
    """
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("helm", "kubectl"):
        path = directory / name
        path.write_text(STAND_IN.replace("{python}", PYTHON, 1))
        path.chmod(0o755)
    manifests = directory / "manifests"
    manifests.mkdir(exist_ok=True)
    for release, values in (releases or {"qwen-npu": {}}).items():
        (manifests / f"{release}.yaml").write_text(manifest(release, values))
    return {
        "PATH": f"{directory}:{os.environ['PATH']}",
        "ONCALL_LOG": str(directory / "calls.jsonl"),
        "ONCALL_PYTHON": PYTHON,
        "HELM_MANIFEST_DIR": str(manifests),
    }


def calls(env: dict[str, str]) -> list[list[str]]:
    log = Path(env["ONCALL_LOG"])
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def ran(
    repo: Path, env: dict[str, str], *args: str
) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    """``make <args>``, which must succeed, and the commands it ran (the stand-ins' log)."""
    done = make(repo, env, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done, calls(env)


def errors(done: subprocess.CompletedProcess[str]) -> str:
    """What a target said on stderr, make's own ``make: ***`` line left out."""
    return "".join(
        line for line in done.stderr.splitlines(keepends=True) if not line.startswith("make: ***")
    )


def printed(done: subprocess.CompletedProcess[str]) -> list[list[str]]:
    """The commands a target printed (`+ ...` lines), parsed back into argument lists."""
    return [shlex.split(line[2:]) for line in done.stdout.splitlines() if line.startswith("+ ")]
