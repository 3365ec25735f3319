"""Every wheel the NPU engine image pins from a package index exists for the engine's Python on
both CPU architectures (issue 22: torch-npu 2.10.0.post6 has no cp312 x86_64 wheel on PyPI).

Asked of the index the Dockerfile names (PIP_INDEX_URL, PyPI) with pip's own finder and the target
flags of `pip download --no-deps --platform ... --python-version ...`: `pip index versions` takes
the same flags and reads the index pages only, so no wheel (torch's is 900 MB) is downloaded. The
machine's pip configuration (local mirrors, find-links) is left out; its CA bundle is kept.
Positive answers are cached per (index, pin, architecture, Python) in ~/.cache/qwen-npu, so a
second run asks nothing; a missing wheel is asked again every time.

Not checkable here, and said in docs/images.md: the PyTorch CPU index (torch, torchvision: the
test asks PyPI for the same releases), Huawei's index (TORCH_NPU_INDEX_URL, empty by default), and
the release downloads (triton-ascend, sgl-kernel-npu), none of which these machines reach.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .dockerfile_parse import parse

pytestmark = [pytest.mark.registry, pytest.mark.slow]  # about 15 s cold on 2 idle cores

ARCHITECTURES = ("x86_64", "aarch64")
#: glibc of the CANN base's OS (BASE_OS ubuntu22.04: glibc 2.35): the newest manylinux it runs.
GLIBC_MINOR = {"ubuntu22.04": 35}
#: Pins the engine image installs from PIP_INDEX_URL (versions.env key -> distribution).
INDEX_PINS = {
    "TORCH_NPU_VERSION": "torch-npu",
    "PYBIND11_VERSION": "pybind11",
    "MEMFABRIC_HYBRID_VERSION": "memfabric-hybrid",
    "MEMFABRIC_ZBAL_VERSION": "memfabric-zbal",
    "SGLANG_ROUTER_VERSION": "sglang-router",
    "ENGINE_NUMPY_VERSION": "numpy",
    # From the PyTorch CPU index in the image (not reachable here): PyPI has the same releases.
    "NPU_TORCH_VERSION": "torch",
    "NPU_TORCHVISION_VERSION": "torchvision",
}
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "qwen-npu"


def _pip_cert() -> str | None:
    if os.environ.get("PIP_CERT"):
        return os.environ["PIP_CERT"]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.cert"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or None


#: pip's own socket timeout for these queries (its default, 15 s, is short for a loaded machine).
PIP_TIMEOUT_S = 60
#: How often one query is asked when the index did not answer it (pip's "Could not fetch URL"):
#: a transport failure says nothing about the wheels, and pip then reports it exactly as it reports
#: a project with no wheel ("No matching distribution found"), so it is told apart and asked again.
FETCH_ATTEMPTS = 3


def _available(index: str, name: str, arch: str, python: str, glibc: int) -> set[str] | str:
    """The versions of ``name`` with a wheel for (arch, python), or the error pip gave."""
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in range(17, glibc + 1)]
    flags = [f"--platform={p}" for p in [*platforms, f"manylinux2014_{arch}"]]
    abi = "cp" + python.replace(".", "")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "index",
        "versions",
        name,
        "--index-url",
        index,
        "--only-binary=:all:",
        *flags,
        f"--python-version={python}",
        "--implementation=cp",
        f"--abi={abi}",
        "--abi=abi3",
        "--abi=none",
        "--disable-pip-version-check",
        f"--timeout={PIP_TIMEOUT_S}",
        "-vv",  # pip says "Could not fetch URL" only at debug level
    ]
    cert = _pip_cert()
    if cert:
        cmd += ["--cert", cert]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # the index the Dockerfile names, nothing else
    # requests prefers REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE to --cert: the same bundle, or none.
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        env.pop(name, None)
    if cert:
        env["REQUESTS_CA_BUNDLE"] = cert
    unanswered = ""
    for _ in range(FETCH_ATTEMPTS):
        done = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        found = re.search(r"^Available versions: (.*)$", done.stdout, re.M)
        if found:
            return {v.strip() for v in found.group(1).split(",")}
        fetch = re.search(r"^Could not fetch URL .*$", done.stdout + done.stderr, re.M)
        if fetch is None:
            lines = (done.stdout + done.stderr).strip().splitlines()
            return lines[-1] if done.returncode and lines else ""
        unanswered = fetch.group(0)
    return f"the index did not answer in {FETCH_ATTEMPTS} attempts: {unanswered}"


@pytest.fixture(scope="module")
def index(repo: Path) -> str:
    url = parse(repo / "docker" / "engine.Dockerfile").every_arg_default()["PIP_INDEX_URL"]
    assert url == "https://pypi.org/simple", url
    return url


def _ask(
    index: str, asks: list[tuple[str, str, str]], python: str, glibc: int
) -> dict[tuple[str, str, str], bool | str]:
    """{(name, version, arch): True, or why not}; positive answers from and into the cache."""
    CACHE.mkdir(parents=True, exist_ok=True)
    cache_file = CACHE / "wheel-resolution.json"
    try:
        cached: dict[str, bool] = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cached = {}
    key = {a: f"{index}|{a[0]}=={a[1]}|{a[2]}|cp{python}|glibc2.{glibc}" for a in asks}
    todo = [a for a in asks if not cached.get(key[a])]
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = dict(
            zip(
                todo,
                pool.map(lambda a: _available(index, a[0], a[2], python, glibc), todo),
                strict=True,
            )
        )
    result: dict[tuple[str, str, str], bool | str] = {}
    for a in asks:
        if cached.get(key[a]):
            result[a] = True
            continue
        answer = answers[a]
        if isinstance(answer, set) and a[1] in answer:
            result[a] = cached[key[a]] = True
        elif isinstance(answer, set):
            result[a] = f"no {a[2]} cp{python} wheel; versions that have one: " + ", ".join(
                sorted(answer)[:12]
            )
        else:
            result[a] = f"pip index versions failed: {answer or 'no answer'}"
    cache_file.write_text(json.dumps(cached, indent=1, sort_keys=True))
    return result


def test_every_index_pin_has_a_wheel_for_the_engine_python_on_both_architectures(
    index: str, versions: dict[str, str]
) -> None:
    python = versions["ENGINE_PYTHON_VERSION"]
    glibc = GLIBC_MINOR["ubuntu22.04"]
    asks = [
        (name, versions[key], arch) for key, name in INDEX_PINS.items() for arch in ARCHITECTURES
    ]
    result = _ask(index, asks, python, glibc)
    missing = [f"{n}=={v} ({a}): {why}" for (n, v, a), why in result.items() if why is not True]
    assert not missing, f"not resolvable from {index} for Python {python}:\n" + "\n".join(missing)


def test_a_pin_without_such_a_wheel_is_found_out(index: str, versions: dict[str, str]) -> None:
    """The check can fail: SGLang's image pins torch-npu 2.10.0.post6, aarch64-only on PyPI
    for cp312 (its x86_64 wheel is on Huawei's index, TORCH_NPU_INDEX_URL)."""
    python = versions["ENGINE_PYTHON_VERSION"]
    ask = ("torch-npu", "2.10.0.post6", "x86_64")
    why = _ask(index, [ask], python, GLIBC_MINOR["ubuntu22.04"])[ask]
    assert isinstance(why, str) and why.startswith(f"no x86_64 cp{python} wheel"), why
    assert versions["TORCH_NPU_VERSION"] in why  # the pinned one is among those that have it
