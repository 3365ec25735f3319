"""Each make verb passes only the variables its verb means (issue 40 item 1).

`make fetch` passed the simulator's PROFILE (a latency profile name, mk/sim.mk) as fetch's
--profile (a chart profile file), so the README's own `make fetch MODEL=... DEST=...` failed. The
two are SIM_PROFILE and CHART_PROFILE now; release's VERSION (the chart's) and sglang-candidate's
SGLang version are VERSION and CANDIDATE. Read through `make -n` (nothing runs), or a real make
with the prerequisites emptied and BIN pointed nowhere, so a guard that is missing fails loudly
instead of fetching.
"""

from __future__ import annotations

import os
import re
import subprocess

from conftest import REPO

SIM_DEFAULT = re.search(r"^SIM_PROFILE \?= (\S+)$", (REPO / "mk" / "sim.mk").read_text(), re.M)


def _make(*args: str, dry: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.pop("PROFILE", None)
    flags = ["-n"] if dry else ["STAMP=", "SIM_RENDERS=", "BIN=/nonexistent/bin"]
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *flags, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _recipe(out: str, verb: str) -> str:
    lines = [
        line
        for line in out.replace("\\\n", " ").splitlines()
        if f"qwen-npu {verb} " in line or f".{verb} " in line
    ]
    assert lines, out
    return lines[-1]


def test_make_fetch_with_model_and_dest_passes_no_profile() -> None:
    done = _make("fetch", "MODEL=hf://org/model", "DEST=x")
    assert done.returncode == 0, done.stderr
    line = _recipe(done.stdout, "fetch")
    assert "'hf://org/model' 'x'" in line and "--profile" not in line


def test_make_fetch_chart_profile_is_the_profile_file() -> None:
    done = _make("fetch", "MODEL=hf://org/model", "DEST=x", "CHART_PROFILE=helm/p.yaml")
    assert "--profile 'helm/p.yaml'" in _recipe(done.stdout, "fetch")


def test_sim_and_mtp_tune_take_the_simulator_profile() -> None:
    assert SIM_DEFAULT, "mk/sim.mk defines SIM_PROFILE"
    assert f"--profile {SIM_DEFAULT.group(1)} " in _recipe(_make("sim").stdout, "sim")
    assert "--profile fast-test " in _recipe(_make("sim", "SIM_PROFILE=fast-test").stdout, "sim")
    tune = _recipe(_make("mtp-tune", "SIM_PROFILE=fast-test").stdout, "mtp-tune")
    assert "--profile fast-test " in tune


def test_the_old_shared_profile_is_refused_not_ignored() -> None:
    for verb, fix in (("fetch", "CHART_PROFILE="), ("sim", "SIM_PROFILE=")):
        done = _make(verb, "MODEL=hf://org/model", "DEST=x", "PROFILE=fast-test", dry=False)
        assert done.returncode == 2, (verb, done.stdout, done.stderr)
        assert f"make {verb}: PROFILE is not a variable" in done.stdout and fix in done.stdout


def test_sglang_candidate_takes_candidate_not_release_version() -> None:
    done = _make("sglang-candidate", "CANDIDATE=0.5.24")
    assert "--version 0.5.24 " in _recipe(done.stdout, "candidate")
    refused = _make("sglang-candidate", "VERSION=0.5.24", dry=False)
    assert refused.returncode == 2 and "pass CANDIDATE=<x>" in refused.stdout
