"""``python -m tools.candidate candidate|snapshot``: the loop behind
``make sglang-candidate CANDIDATE=<x>``.

Why a venv of its own: the candidate SGLang must be imported with the pinned CPU torch and
nothing else of ours changed, and ``.venv`` must keep the pinned release the rest of the tests
run on. The scratch venv (``.venv-candidate`` in the checkout, git-ignored) keeps its base (torch,
requirements/sglang-cpu.txt, the sidecar extra SGLang's HTTP modules import, pytest) while the
inputs stay the same, and gets the candidate SGLang reinstalled each run (``--no-deps``, as
``make setup`` installs it); the checkout reaches it through a ``.pth`` file, with the start-up
hook's ``.pth`` beside it, so no build step runs. ``--source DIR`` skips the venv and puts an
SGLang tree first on the path of this Python (a fake candidate in the tests, an SGLang checkout's
``python/`` folder by hand).

Steps (each printed as it starts, child output streamed): the venv, the candidate, the probe
(``probe``), the diff (``sources``, no import), the patch and contract tests with the candidate's
pins (``pins_plugin``), the report (``report``), and with ``--repin`` the new pins (``repin``).
Output: the report on stdout and in ``out/sglang-candidate/<version>/`` (report.md, report.json,
probe.json, junit.xml).
"""

from __future__ import annotations

import argparse
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
from typing import Any

from qwen_npu.cli_parser import OneLineParser, fail, output_file
from qwen_npu.patches.hook import ENV_HOOK
from qwen_npu.patches.registry import PATCHES
from tools.candidate import ENV_PINS, repin, report, sources

VENV_NAME = ".venv-candidate"
OUT_NAME = "out/sglang-candidate"
VERSIONS_FILE = "docker/versions.env"
REQUIREMENTS = "requirements/sglang-cpu.txt"
#: The venv's base mirrors .venv's (make setup): every extra's pins from pyproject.toml, since the
#: tests' conftest files import tools that need them (the chart renders, the linters' helpers).
STAMP = ".qwen-npu-candidate-base"
#: Our variables a child keeps (a renders file of the caller's for a simulator YAML of its own).
PASSED_ON = frozenset({"QWEN_NPU_CHART_RENDERS"})
#: The released sgl-kernel-npu decode kernel's stand-in (K-major) that the decode patch's tests use.
DECODE_KERNEL = "tests/patches/gdn_decode_kernel_template.py"
VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")
PIP_NOISE = (
    "is ignored: it is neither a file nor a directory",
    "dependency resolver does not currently",
    "which is not installed",
    "which is incompatible",
)
PIP_SHOWN = ("Collecting", "Installing", "Successfully", "ERROR", "Processing", "Attempting")


class CandidateError(Exception):
    """Bad input or a failed step: one line naming what and the fix (never a traceback)."""


def read_versions(checkout: Path) -> dict[str, str]:
    path = checkout / VERSIONS_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CandidateError(f"{path}: {exc.strerror}; run from a qwen-npu checkout") from None
    values = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def base_pins(checkout: Path) -> list[str]:
    """What the venv's base installs beside the requirements file: the pinned CPU torch first,
    then every extra's pins (read from versions.env and pyproject.toml, not repeated here)."""
    versions = read_versions(checkout)
    with (checkout / "pyproject.toml").open("rb") as handle:
        extras = tomllib.load(handle)["project"]["optional-dependencies"]
    pins = sorted({pin for group in extras.values() for pin in group if "==" in pin})
    return [f"torch=={versions['TEST_TORCH_VERSION']}", *pins]


class Progress:
    """``>> [step] what`` lines on stderr, each child line indented under its step."""

    def __init__(self, stream: Any = sys.stderr) -> None:
        self.stream = stream
        self.started = time.monotonic()
        self.timings: dict[str, float] = {}

    def step(self, name: str, what: str) -> None:
        print(f">> [{time.monotonic() - self.started:5.0f} s] {name}: {what}", file=self.stream,
              flush=True)  # fmt: skip

    def line(self, text: str) -> None:
        print(f"     {text}", file=self.stream, flush=True)


def stream(
    command: Sequence[str],
    progress: Progress,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    keep: Callable[[str], bool] = lambda line: True,
    log: Path | None = None,
) -> int:
    """Run a child, showing the lines ``keep`` accepts as they come; the whole output in ``log``."""
    handle = log.open("w", encoding="utf-8") if log is not None else None
    try:
        child = subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=env, cwd=cwd, bufsize=1,
        )  # fmt: skip
        assert child.stdout is not None
        for raw in child.stdout:
            line = raw.rstrip("\n")
            if handle is not None:
                handle.write(raw)
            if line and keep(line):
                progress.line(line[:200])
        return child.wait()
    finally:
        if handle is not None:
            handle.close()


def _pip_line(line: str) -> bool:
    """pip's lines worth showing: the direct requirements (not their dependencies), the install."""
    if "->" in line or any(noise in line for noise in PIP_NOISE):
        return False
    return line.startswith(PIP_SHOWN)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _purelib(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Path(out.stdout.strip())


def ensure_base(venv: Path, base_python: str, checkout: Path, progress: Progress) -> None:
    """Create (or keep) the venv with the base packages; rebuilt when the inputs change."""
    pins = base_pins(checkout)
    requirements = (checkout / REQUIREMENTS).read_bytes()
    version = subprocess.run(
        [base_python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True
    )
    if version.returncode != 0:
        raise CandidateError(f"{base_python}: cannot run it; pass --python with a Python 3.11")
    stamp = json.dumps(
        {"python": version.stdout.strip(), "pins": pins,
         "requirements": hashlib.sha256(requirements).hexdigest()}, sort_keys=True,
    )  # fmt: skip
    if (venv / STAMP).is_file() and (venv / STAMP).read_text() == stamp:
        progress.step("venv", f"{venv} kept (same Python, torch, requirements and pins)")
        return
    try:
        same_python = json.loads((venv / STAMP).read_text())["python"] == version.stdout.strip()
    except (OSError, ValueError, KeyError):
        same_python = False
    if same_python and venv_python(venv).is_file():
        progress.step("venv", f"{venv}: the pins or requirements changed, installing on top")
    else:
        progress.step("venv", f"creating {venv} with {base_python}: {pins[0]}, {len(pins)} pins, "
                      f"{REQUIREMENTS}")  # fmt: skip
        shutil.rmtree(venv, ignore_errors=True)
        if subprocess.run([base_python, "-m", "venv", str(venv)]).returncode != 0:
            raise CandidateError(f"{base_python} -m venv {venv} failed; see the output above")
    command = [str(venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check",
               "--progress-bar", "off", *pins, "-r", str(checkout / REQUIREMENTS)]  # fmt: skip
    if stream(command, progress, keep=_pip_line, log=venv / "pip-base.log") != 0:
        raise CandidateError(f"installing the base failed; see {venv / 'pip-base.log'}")
    (venv / STAMP).write_text(stamp)


def install_sglang(venv: Path, spec: str, checkout: Path, progress: Progress) -> None:
    """The candidate SGLang without its GPU dependencies, and the checkout on the venv's path."""
    progress.step("sglang", f"installing {spec} --no-deps")
    python = venv_python(venv)
    command = [str(python), "-m", "pip", "install", "--disable-pip-version-check",
               "--progress-bar", "off", "--no-deps", "--force-reinstall", spec]  # fmt: skip
    if stream(command, progress, keep=_pip_line, log=venv / "pip-sglang.log") != 0:
        raise CandidateError(
            f"pip could not install {spec}; see {venv / 'pip-sglang.log'} (a release that is not "
            "on the index, or a wheel for another Python?)"
        )
    site = _purelib(python)
    (site / "qwen_npu_checkout.pth").write_text(f"{checkout}\n")
    hook = checkout / "qwen_npu" / "patches" / "qwen_npu_patches.pth"
    shutil.copyfile(hook, site / hook.name)


def child_env(checkout: Path, extra_path: Sequence[Path]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("QWEN_NPU_", "PYTHON")) or k in PASSED_ON
    }
    paths = [*map(str, extra_path), str(checkout), str(checkout / "tests" / "stubs")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_probe(
    python: Path, checkout: Path, extra_path: Sequence[Path], out: Path, progress: Progress
) -> dict[str, Any]:
    progress.step("probe", "importing the targets, applying the patches, checking the contract")
    env = child_env(checkout, extra_path) | {
        ENV_HOOK: "0",
        "QWEN_NPU_PATCH_LOG_LEVEL": "CRITICAL",
    }
    probe = ["-m", "tools.candidate.probe", "--out", str(out / "probe.json")]
    kernel = ["--decode-kernel", str(checkout / DECODE_KERNEL)]
    command = [str(python), "-W", "ignore", *probe, *kernel]
    code = stream(command, progress, env=env, cwd=checkout, log=out / "probe.log")
    if code != 0 or not (out / "probe.json").is_file():
        raise CandidateError(f"the probe failed (exit {code}); see {out / 'probe.log'}")
    data: dict[str, Any] = json.loads((out / "probe.json").read_text(encoding="utf-8"))
    return data


def candidate_pins(changes: Sequence[sources.Change]) -> dict[str, list[dict[str, Any]]]:
    """patch module -> its PINS with the candidate's params and fingerprints (``pins_plugin``)."""
    pins: dict[str, list[dict[str, Any]]] = {}
    found = {(c.unit.owner, c.unit.selector): c.candidate for c in changes}
    for name, (module, pinned) in sources.patch_pins().items():
        rows = pins.setdefault(module, [])
        for pin in pinned:
            new = found.get((name, pin.qualname))
            params = new.params if new is not None and new.params is not None else pin.params
            fingerprint = new.fingerprint if new is not None else pin.fingerprint
            rows.append({"module": pin.module, "qualname": pin.qualname, "params": list(params),
                         "fingerprint": fingerprint})  # fmt: skip
    return pins


def run_tests(
    python: Path,
    checkout: Path,
    extra_path: Sequence[Path],
    files: Sequence[str],
    pins: dict[str, Any],
    out: Path,
    progress: Progress,
) -> dict[str, report.TestFile]:
    progress.step("tests", f"{len(files)} files with the candidate's pins: {' '.join(files)}")
    (out / "pins.json").write_text(json.dumps(pins, indent=1) + "\n", encoding="utf-8")
    junit = out / "junit.xml"
    junit.unlink(missing_ok=True)
    env = child_env(checkout, extra_path) | {ENV_PINS: str(out / "pins.json")}
    plugins = ["-p", "tools.candidate.pins_plugin", "-p", "no:cacheprovider"]
    command = [str(python), "-m", "pytest", *plugins, "-q", "-n", "0", f"--junitxml={junit}"]
    command += files

    def keep(line: str) -> bool:
        return not line.startswith(("  ", "E ", "tests/", "_")) or "passed" in line

    stream(command, progress, env=env, cwd=checkout, keep=keep, log=out / "pytest.log")
    return report.parse_junit(junit)


def spec_of(args: argparse.Namespace) -> tuple[str, str]:
    """(pip's requirement, the label) from --version or --wheel."""
    if args.wheel is not None:
        wheel = Path(args.wheel).resolve()
        if not wheel.is_file() or wheel.suffix != ".whl":
            raise CandidateError(f"--wheel {args.wheel}: no such .whl file; pass a built wheel")
        return str(wheel), f"wheel {wheel.name}"
    if not VERSION_RE.match(args.version or ""):
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

    checkout = Path(args.checkout).resolve()
    if not (checkout / "tests" / "patches").is_dir():
        raise CandidateError(f"{checkout}: not a qwen-npu checkout (no tests/patches); --checkout")
    if args.source is not None:
        return _check(args, checkout, [source_path(args.source)], None)
    spec = spec_of(args)
    lock = checkout / OUT_NAME / ".lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f">> another candidate run holds {lock}; waiting for it", file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        return _check(args, checkout, [], spec)


def _check(
    args: argparse.Namespace, checkout: Path, extra: list[Path], spec: tuple[str, str] | None
) -> int:
    progress = Progress()
    pinned_file = checkout / sources.PINNED_IN_CHECKOUT
    pinned = sources.load_pinned(pinned_file)
    timings: dict[str, float] = {}

    def timed(name: str, action: Callable[[], Any]) -> Any:
        started = time.monotonic()
        try:
            return action()
        finally:
            timings[name] = time.monotonic() - started

    if spec is None:
        python = Path(sys.executable)
        origin = f"the tree {extra[0]}"
        label = args.label or "source"
    else:
        requirement, origin = spec
        venv = Path(args.venv).resolve() if args.venv else checkout / VENV_NAME
        if venv == (checkout / ".venv").resolve():
            raise CandidateError("--venv .venv: the candidate never goes into .venv; pick another")
        timed("venv", lambda: ensure_base(venv, args.python, checkout, progress))
        timed("install", lambda: install_sglang(venv, requirement, checkout, progress))
        python = venv_python(venv)
        label = args.version or Path(requirement).name.split("-")[1]
    out = Path(args.out).resolve() if args.out else checkout / OUT_NAME / label
    out.mkdir(parents=True, exist_ok=True)
    probe = timed("probe", lambda: run_probe(python, checkout, extra, out, progress))
    version = str(probe["sglang_version"])
    sglang_dir = Path(probe["sglang_dir"])
    if not sglang_dir.is_dir():
        raise CandidateError(f"the candidate's sglang does not import: {probe['sglang_dir']}")
    progress.step("diff", f"the pinned {pinned.version}'s code against {sglang_dir}")
    changes = timed("diff", lambda: sources.compare(pinned, sglang_dir, version))
    files = [report.patch_test_file(checkout, info.module) for info in PATCHES]
    files.append(report.CONTRACT_TEST_FILE)
    tests = timed(
        "tests",
        lambda: run_tests(python, checkout, extra, files, candidate_pins(changes), out, progress),
    )
    rows = report.patch_rows(probe, changes, tests, checkout, version)
    links = report.link_rows(probe, changes)
    contract_tests = tests.get(report.CONTRACT_TEST_FILE) or report.TestFile(
        report.CONTRACT_TEST_FILE
    )
    text = report.render(
        version=version, pinned=pinned.version, origin=origin, probe=probe, rows=rows,
        links=links, timings=timings, contract_tests=contract_tests,
    )  # fmt: skip
    data = report.as_json(version=version, pinned=pinned.version, rows=rows, links=links,
                          timings=timings)  # fmt: skip
    (out / "report.md").write_text(text, encoding="utf-8")
    (out / "report.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(data, indent=1) if args.json else text)
    progress.step("done", f"{out / 'report.md'} ({sum(timings.values()):.0f} s)")
    if args.repin:
        return repin.repin(
            checkout=checkout, version=version, rows=rows, links=links, changes=changes,
            sglang_dir=sglang_dir, contract_tests=contract_tests, pinned_file=pinned_file,
        )  # fmt: skip
    return 0


def snapshot(args: argparse.Namespace) -> int:
    """Write the pinned sources from an installed (or given) SGLang tree."""

    if args.source is not None:
        sglang_dir = source_path(args.source) / "sglang"
        version = args.label or "source"
    else:
        spec = importlib.util.find_spec("sglang")
        if spec is None or not spec.submodule_search_locations:
            raise CandidateError("no sglang installed here; run make setup (or pass --source)")
        sglang_dir = Path(next(iter(spec.submodule_search_locations)))
        version = importlib.metadata.version("sglang")
    try:
        data = sources.snapshot(sglang_dir, version)
    except LookupError as exc:
        raise CandidateError(f"{exc}: is {sglang_dir} the release the PINS are for?") from None
    target = Path(args.out) if args.out else sources.PINNED_FILE
    target.parent.mkdir(parents=True, exist_ok=True)  # --out's missing folders (output_file)
    target.write_text(sources.dump(data), encoding="utf-8")
    print(f"{target}: {len(data['units'])} units from sglang {version} ({sglang_dir})")
    return 0


def add_parsers(sub: Any) -> None:
    """The ``candidate`` and ``snapshot`` subcommands (make sglang-candidate, sglang-snapshot)."""
    cand = sub.add_parser(
        "candidate", help="what a new SGLang release changes, per patch and contract link"
    )
    which = cand.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", help="an SGLang release on the package index, e.g. 0.5.24")
    which.add_argument("--wheel", help="an SGLang wheel file")
    which.add_argument(
        "--source", metavar="DIR", help="an SGLang tree (sglang/ or its parent), no venv"
    )
    cand.add_argument("--venv", help=f"the scratch venv (default: <checkout>/{VENV_NAME})")
    cand.add_argument("--python", default=sys.executable, help="the Python the venv is made with")
    cand.add_argument("--out", help=f"the report's folder (default: <checkout>/{OUT_NAME}/<v>)")
    cand.add_argument("--label", help="with --source: the name of the report's folder")
    cand.add_argument("--checkout", default=".", help="the qwen-npu checkout (default: here)")
    cand.add_argument("--json", action="store_true", help="print the report as JSON")
    cand.add_argument(
        "--repin",
        action="store_true",
        help="after a green report, write the new PINS and move SGLANG_VERSION (never in CI)",
    )
    cand.set_defaults(func=_guarded(check))
    snap = sub.add_parser(
        "snapshot", help="write the pinned SGLang's sources (the candidate diff's base)"
    )
    snap.add_argument("--source", metavar="DIR", help="an SGLang tree instead of the installed")
    snap.add_argument("--label", help="with --source: the version to record")
    snap.add_argument("--out", type=output_file, help=f"the file (default: {sources.PINNED_FILE})")
    snap.set_defaults(func=_guarded(snapshot))


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (CandidateError, LookupError) as exc:  # LookupError: the pinned sources' file
            return fail(f"sglang-{args.command}", str(exc.args[0]))
        except KeyboardInterrupt:
            return 130

    return run


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m tools.candidate")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))
