"""``python -m tools.candidate candidate|snapshot``: the loop behind ``make sglang-candidate``.

Why a venv of its own: the candidate SGLang must run with the pinned CPU torch while ``.venv`` keeps
the pinned release. ``.venv-candidate`` keeps its base while its inputs stay the same; the candidate
is reinstalled each run ``--no-deps`` and reaches the checkout and the start-up hook through
``.pth`` files. ``--source DIR`` skips the venv: an SGLang tree first on this Python's path.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from subprocess import PIPE, STDOUT, Popen
from typing import Any

from qwen_npu.cli_parser import OneLineParser, fail
from qwen_npu.patches.hook import ENV_HOOK
from qwen_npu.patches.registry import PATCHES
from tools.candidate import ENV_PINS, repin, report, sources
from tools.paths import OUT, REPO, STUBS
from tools.versions import read_versions

VENV = REPO / ".venv-candidate"
OUT_DIR = OUT / "sglang-candidate"
REQUIREMENTS = REPO / "requirements" / "sglang-cpu.txt"
STAMP = ".qwen-npu-candidate-base"
#: The variables a child does not inherit (ours, Python's), but a renders file of the caller's.
DROPPED = ("QWEN_NPU_", "PYTHON")
PASSED_ON = frozenset({"QWEN_NPU_CHART_RENDERS"})
#: The released sgl-kernel-npu decode kernel's stand-in (K-major) that the decode patch's tests use.
DECODE_KERNEL = REPO / "tests" / "patches" / "gdn_decode_kernel_template.py"
VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")
PIP_INSTALL = ("-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off")
PIP_NOISE = ("->", "is ignored: it is", "resolver does not", "is not installed", "is incompatible")
PIP_SHOWN = ("Collecting", "Installing", "Successfully", "ERROR", "Processing", "Attempting")
STARTED = time.monotonic()
#: Seconds per finished step (the report's first line); the step running and when it started.
TIMINGS: dict[str, float] = {}
_RUNNING: list[tuple[str, float]] = []


class CandidateError(Exception):
    """Bad input or a failed step: one line naming what and the fix (never a traceback)."""


def step(name: str, what: str) -> None:
    now = time.monotonic()
    for running, started in _RUNNING[-1:]:
        TIMINGS[running] = now - started
    _RUNNING.append((name, now))
    print(f">> [{now - STARTED:5.0f} s] {name}: {what}", file=sys.stderr, flush=True)


def stream(
    command: Sequence[str], log: Path, keep: Callable[[str], bool] = bool, **popen: Any
) -> int:
    """Run a child, showing the lines ``keep`` accepts under its step; all of them in ``log``."""
    with (
        log.open("w", encoding="utf-8") as handle,
        Popen(command, stdout=PIPE, stderr=STDOUT, text=True, bufsize=1, **popen) as child,
    ):
        assert child.stdout is not None
        for line in child.stdout:
            handle.write(line)
            if line.strip() and keep(line):
                print(f"     {line.rstrip()[:200]}", file=sys.stderr, flush=True)
    return child.returncode


def _pip_line(line: str) -> bool:
    """pip's lines worth showing: the direct requirements (not their dependencies), the install."""
    return line.startswith(PIP_SHOWN) and not any(noise in line for noise in PIP_NOISE)


def _pip(venv: Path, *args: str) -> list[str]:
    return [str(venv / "bin" / "python"), *PIP_INSTALL, *args]


def ensure_base(venv: Path, base_python: str) -> None:
    """Create (or keep) the venv with the base: the pinned CPU torch, then every extra's pins
    (as ``make setup``: the tests' conftest files import tools that need them), rebuilt when the
    Python changes and installed on top when the pins or requirements do."""
    with (REPO / "pyproject.toml").open("rb") as handle:
        extras = tomllib.load(handle)["project"]["optional-dependencies"]
    torch = f"torch=={read_versions()['TEST_TORCH_VERSION']}"
    pins = [torch, *sorted({pin for group in extras.values() for pin in group if "==" in pin})]
    run = subprocess.run(
        [base_python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True
    )
    if run.returncode != 0:
        raise CandidateError(f"{base_python}: cannot run it; pass --python with a Python 3.11")
    requirements = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = {"python": run.stdout.strip(), "pins": pins, "requirements": requirements}
    try:
        was = json.loads((venv / STAMP).read_text())
    except (OSError, ValueError):
        was = {}
    if was == stamp:
        step("venv", f"{venv} kept (same Python, torch, requirements and pins)")
        return
    if was.get("python") == stamp["python"] and (venv / "bin" / "python").is_file():
        step("venv", f"{venv}: the pins or requirements changed, installing on top")
    else:
        step("venv", f"creating {venv} with {base_python}: {torch} and {len(pins) - 1} pins")
        shutil.rmtree(venv, ignore_errors=True)
        if subprocess.run([base_python, "-m", "venv", str(venv)]).returncode != 0:
            raise CandidateError(f"{base_python} -m venv {venv} failed; see the output above")
    if stream(_pip(venv, *pins, "-r", str(REQUIREMENTS)), venv / "pip-base.log", _pip_line):
        raise CandidateError(f"installing the base failed; see {venv / 'pip-base.log'}")
    (venv / STAMP).write_text(json.dumps(stamp, sort_keys=True))


def install_sglang(venv: Path, spec: str) -> None:
    """The candidate SGLang without its GPU dependencies, and the checkout on the venv's path."""
    step("install", f"{spec} --no-deps")
    log = venv / "pip-sglang.log"
    if stream(_pip(venv, "--no-deps", "--force-reinstall", spec), log, _pip_line):
        raise CandidateError(
            f"pip could not install {spec}; see {log} (a release that is not on the index, or a "
            "wheel for another Python?)"
        )
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(
        subprocess.check_output([venv / "bin" / "python", "-c", purelib], text=True).strip()
    )
    (site / "qwen_npu_checkout.pth").write_text(f"{REPO}\n")
    hook = REPO / "qwen_npu" / "patches" / "qwen_npu_patches.pth"
    shutil.copyfile(hook, site / hook.name)


def child_env(extra_path: Sequence[Path], **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in PASSED_ON or not k.startswith(DROPPED)}
    path = os.pathsep.join(map(str, [*extra_path, REPO, STUBS]))
    return env | {"PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"} | more


def run_probe(python: Path, extra_path: Sequence[Path], out: Path) -> dict[str, Any]:
    step("probe", "importing the targets, applying the patches, checking the contract")
    env = child_env(extra_path, **{ENV_HOOK: "0", "QWEN_NPU_PATCH_LOG_LEVEL": "CRITICAL"})
    probe = ["-m", "tools.candidate.probe", str(out / "probe.json"), str(DECODE_KERNEL)]
    code = stream([str(python), "-W", "ignore", *probe], out / "probe.log", env=env, cwd=REPO)
    if code != 0 or not (out / "probe.json").is_file():
        raise CandidateError(f"the probe failed (exit {code}); see {out / 'probe.log'}")
    data: dict[str, Any] = json.loads((out / "probe.json").read_text(encoding="utf-8"))
    return data


def candidate_pins(changes: Sequence[sources.Change]) -> dict[str, list[dict[str, Any]]]:
    """patch module -> its PINS with the candidate's params and fingerprints (``pins_plugin``)."""
    pins: dict[str, list[dict[str, Any]]] = {}
    found = {(c.unit.owner, c.unit.selector): c.candidate for c in changes}
    for name, (module, pinned) in sources.patch_pins().items():
        for pin in pinned:
            new = found.get((name, pin.qualname))
            if new is not None and new.params is not None:
                pin = dataclasses.replace(pin, params=new.params, fingerprint=new.fingerprint)
            pins.setdefault(module, []).append(dataclasses.asdict(pin))
    return pins


def run_tests(
    python: Path, extra_path: Sequence[Path], pins: dict[str, Any], out: Path
) -> dict[str, report.TestFile]:
    files = [report.patch_test_file(info.module) for info in PATCHES]
    files.append(report.CONTRACT_TEST_FILE)
    step("tests", f"{len(files)} files with the candidate's pins: {' '.join(files)}")
    (out / "pins.json").write_text(json.dumps(pins, indent=1) + "\n", encoding="utf-8")
    junit = out / "junit.xml"
    junit.unlink(missing_ok=True)
    env = child_env(extra_path, **{ENV_PINS: str(out / "pins.json")})
    plugins = ["-p", "tools.candidate.pins_plugin", "-p", "no:cacheprovider"]
    command = [str(python), "-m", "pytest", *plugins, "-q", "-n", "0", f"--junitxml={junit}"]

    def keep(line: str) -> bool:
        return not line.startswith(("  ", "E ", "tests/", "_")) or "passed" in line

    stream([*command, *files], out / "pytest.log", keep, env=env, cwd=REPO)
    return report.parse_junit(junit)


def spec_of(args: argparse.Namespace) -> tuple[str, str]:
    if args.wheel is not None:
        wheel = Path(args.wheel).resolve()
        if not wheel.is_file() or wheel.suffix != ".whl":
            raise CandidateError(f"--wheel {args.wheel}: no such .whl file; pass a built wheel")
        return str(wheel), f"wheel {wheel.name}"
    if not VERSION_RE.match(args.version):
        raise CandidateError(
            f"--version {args.version!r} is not a release number; pass one like 0.5.24"
        )
    return f"sglang=={args.version}", f"the package index (sglang=={args.version})"


def source_path(directory: str) -> Path:
    """The folder to put first on the path for an SGLang tree (its parent when given sglang/)."""
    path = Path(directory).resolve()
    if (path / "sglang" / "__init__.py").is_file():
        return path
    if path.name == "sglang" and (path / "__init__.py").is_file():
        return path.parent
    raise CandidateError(f"--source {directory}: no sglang package there (sglang/__init__.py)")


def check(args: argparse.Namespace) -> int:
    """Validate, then run; runs that use the venv take a lock in out/ (they share it)."""
    extra = [] if args.source is None else [source_path(args.source)]
    spec = None if extra else spec_of(args)
    lock = OUT_DIR / ".lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f">> another candidate run holds {lock}; waiting for it", file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        return _check(args, extra, spec)


def _check(args: argparse.Namespace, extra: list[Path], spec: tuple[str, str] | None) -> int:
    pinned = sources.load_pinned()
    if spec is None:
        python, origin, label = Path(sys.executable), f"the tree {extra[0]}", "source"
    else:
        requirement, origin = spec
        venv = Path(args.venv).resolve() if args.venv else VENV
        if venv == (REPO / ".venv").resolve():
            raise CandidateError("--venv .venv: the candidate never goes into .venv; pick another")
        ensure_base(venv, args.python)
        install_sglang(venv, requirement)
        python = venv / "bin" / "python"
        label = args.version or Path(requirement).name.split("-")[1]
    out = Path(args.out).resolve() if args.out else OUT_DIR / label
    out.mkdir(parents=True, exist_ok=True)
    probe = run_probe(python, extra, out)
    version, sglang_dir = str(probe["sglang_version"]), Path(probe["sglang_dir"])
    if not sglang_dir.is_dir():
        raise CandidateError(f"the candidate's sglang does not import: {probe['sglang_dir']}")
    step("diff", f"the pinned {pinned.version}'s code against {sglang_dir}")
    changes = sources.compare(pinned, sglang_dir, version)
    tests = run_tests(python, extra, candidate_pins(changes), out)
    step("report", f"{out / 'report.md'}")
    rows = report.patch_rows(probe, changes, tests, version)
    links = report.link_rows(probe, changes)
    contract = tests.get(report.CONTRACT_TEST_FILE) or report.TestFile(report.CONTRACT_TEST_FILE)
    verdicts = report.Verdicts(version, pinned.version, rows, links, contract)
    text, data = report.render(verdicts, origin, probe, TIMINGS)
    (out / "report.md").write_text(text, encoding="utf-8")
    (out / "report.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(data, indent=1) if args.json else text)
    return repin.repin(verdicts, REPO, sglang_dir, sources.PINNED_FILE) if args.repin else 0


def snapshot(args: argparse.Namespace) -> int:
    """Write the pinned sources from the installed SGLang (``.venv``'s, the pinned release)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise CandidateError("no sglang installed here; run make setup")
    sglang_dir = Path(next(iter(spec.submodule_search_locations)))
    version = importlib.metadata.version("sglang")
    try:
        data = sources.snapshot(sglang_dir, version)
    except LookupError as exc:
        raise CandidateError(f"{exc}: is {sglang_dir} the release the PINS are for?") from None
    sources.PINNED_FILE.write_text(sources.dump(data), encoding="utf-8")
    print(f"{sources.PINNED_FILE}: {len(data['units'])} units from sglang {version} ({sglang_dir})")
    return 0


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m tools.candidate")
    sub = parser.add_subparsers(dest="command", required=True)
    cand = sub.add_parser(
        "candidate", help="what a new SGLang release changes, per patch and contract link"
    )
    which = cand.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", help="an SGLang release on the package index, e.g. 0.5.24")
    which.add_argument("--wheel", help="an SGLang wheel file")
    which.add_argument("--source", metavar="DIR", help="an SGLang tree (sglang/ or its parent)")
    cand.add_argument("--venv", help=f"the scratch venv (default: {VENV.name} in the checkout)")
    cand.add_argument("--python", default=sys.executable, help="the Python the venv is made with")
    cand.add_argument("--out", help="the report's folder (default: out/sglang-candidate/<v>)")
    cand.add_argument("--json", action="store_true", help="print the report as JSON")
    cand.add_argument(
        "--repin",
        action="store_true",
        help="after a green report, write the new PINS and move SGLANG_VERSION (never in CI)",
    )
    cand.set_defaults(func=check)
    sub.add_parser(
        "snapshot", help="write the pinned SGLang's sources (the candidate diff's base)"
    ).set_defaults(func=snapshot)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (CandidateError, LookupError) as exc:  # LookupError: the pinned sources' file
        return fail(f"sglang-{args.command}", str(exc.args[0]))
