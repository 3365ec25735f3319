"""``qwen-npu qualify`` end to end against simulators: agreement, --require-npu, and the failures.

Two healthy simulators with the same profile pass every claim that runs here, with the NPU-only
checks skipped and listed (exit 0), and fail under ``--require-npu`` (exit 1). A simulator with
the ``garbled`` fault against a healthy one, a server that loops after a sane opening, and a server
whose answers differ from the first token each fail the answers claim, naming the prompt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from qwen_npu.qualify import prompts
from qwen_npu.qualify.claims import CLAIMS
from qwen_npu.qualify.claims.answers import DEFAULT_EARLY_TOKENS, DEGENERATION_MAX

from .conftest import Answerer, claim, qualify, report

pytestmark = pytest.mark.slow

SPEED = ("--num-prompts", "3", "--concs", "1 2", "--input-len", "64", "--output-len", "8")
FIRST = prompts.builtin()[0].id


def test_two_healthy_simulators_agree_and_every_claim_is_in_the_report(
    healthy_pair: tuple[str, str], tmp_path: Path
) -> None:
    a, b = healthy_pair
    out = tmp_path / "out"
    proc = qualify(
        "--target", a, "--compare", b, "--max-new-tokens", "24", "--repeats", "2", *SPEED,
        "--output-dir", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = proc.stdout.strip().splitlines()  # one verdict line
    assert line.startswith("qwen-npu qualify: PASS (start pass, answers pass, accuracy skipped, ")
    doc = report(out)
    assert [c["name"] for c in doc["claims"]] == list(CLAIMS)
    assert doc["verdict"] == "pass" and doc["exit_status"] == 0
    verdicts = {c["name"]: c["verdict"] for c in doc["claims"]}
    assert verdicts == {
        "start": "pass", "answers": "pass", "accuracy": "skipped", "speed": "pass",
        "kernels": "skipped",
    }  # fmt: skip
    answers = claim(doc, "answers")
    assert len(answers["data"]["prompts"]) == len(prompts.builtin()) >= 32
    agreement = next(c for c in answers["checks"] if c["name"] == "agreement")
    assert agreement["verdict"] == "pass"
    assert agreement["evidence"].startswith(f"identical {len(prompts.builtin())}/")
    npu_skipped = [
        (c["name"], k["name"]) for c in doc["claims"] for k in c["checks"]
        if k["npu_only"] and k["verdict"] == "skipped"
    ]  # fmt: skip
    assert ("start", "patches applied") in npu_skipped and ("kernels", "kernels") in npu_skipped
    speed = claim(doc, "speed")
    assert len(speed["data"]["records"]) == 2 * 2 * 2  # 2 concs x 2 repeats x 2 sides
    assert "NPU-only checks skipped" in line
    md = (out / "report.md").read_text()
    assert "## answers: pass" in md and "Concurrency 1" in md


def test_require_npu_fails_when_the_npu_only_checks_were_skipped(
    healthy_pair: tuple[str, str], tmp_path: Path
) -> None:
    a, b = healthy_pair
    out = tmp_path / "out"
    proc = qualify(
        "--target", a, "--compare", b, "--claims", "start,answers", "--prompts", "4",
        "--max-new-tokens", "16", "--require-npu", "--output-dir", str(out),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "(--require-npu: a failure)" in proc.stdout
    doc = report(out)
    assert doc["verdict"] == "fail"
    assert "start (NPU-only skipped)" in doc["failed"]
    assert claim(doc, "answers")["verdict"] == "pass"  # nothing failed but the missing evidence


def test_a_garbled_simulator_against_a_healthy_one_fails_answers_naming_the_prompt(
    healthy_pair: tuple[str, str], garbled_sim: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    proc = qualify(
        "--target", garbled_sim, "--compare", healthy_pair[0], "--claims", "answers",
        "--prompts", "6", "--max-new-tokens", "48", "--output-dir", str(out),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = report(out)
    checks = {c["name"]: c for c in claim(doc, "answers")["checks"]}
    agreement = checks["agreement"]["evidence"]
    assert checks["agreement"]["verdict"] == "fail"
    assert f"first {FIRST} at token " in agreement
    # the simulator repeats after 8 tokens with period 3: the first difference is token 11
    assert f"first {FIRST} at token 11 (ids " in agreement
    assert checks["no degeneration"]["verdict"] == "fail"
    assert f"first {FIRST} " in checks["no degeneration"]["evidence"]
    assert checks["no degeneration (compare)"]["verdict"] == "pass"
    assert f" of 6 answers degenerated, first {FIRST} " in proc.stdout  # the verdict line


def _words(seed: str, n: int) -> list[str]:
    """n varied words, a function of the seed (no repeats to speak of)."""
    out = []
    for i in range(n):
        h = hashlib.blake2b(f"{seed}/{i}".encode(), digest_size=4).hexdigest()
        out.append(f"w{h}")
    return out


def test_an_answer_that_loops_after_a_sane_opening_fails_naming_the_prompt(
    fixture_server: Callable[[Answerer], str], tmp_path: Path
) -> None:
    def loops(prompt: str, n: int) -> str:
        # a sane opening long enough that the whole answer scores under the canary's limit:
        # its second half loops
        opening = _words(prompt, 80)
        return " ".join(opening + ["and", "then", "again"] * 20)

    url = fixture_server(loops)
    out = tmp_path / "out"
    proc = qualify("--target", url, "--claims", "answers", "--prompts", "3",
                   "--output-dir", str(out))  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    check = {c["name"]: c for c in claim(report(out), "answers")["checks"]}["no degeneration"]
    assert check["verdict"] == "fail"
    assert check["evidence"].startswith(f"3 of 3 answers degenerated, first {FIRST} (score 0.")
    scores = claim(report(out), "answers")["data"]["target"]["degeneration"][FIRST]
    assert scores["score"] < DEGENERATION_MAX < scores["tail_score"]


def test_answers_that_differ_from_the_start_fail_naming_the_first_prompt(
    healthy_pair: tuple[str, str], fixture_server: Callable[[Answerer], str], tmp_path: Path
) -> None:
    other = fixture_server(lambda prompt, n: " ".join(_words("x" + prompt, n)))
    out = tmp_path / "out"
    proc = qualify(
        "--target", healthy_pair[0], "--compare", other, "--claims", "answers", "--prompts", "3",
        "--max-new-tokens", "32", "--output-dir", str(out),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    agreement = {c["name"]: c for c in claim(report(out), "answers")["checks"]}["agreement"]
    assert agreement["verdict"] == "fail"
    assert "identical 0/3" in agreement["evidence"]
    assert f"3 diverge inside the first {DEFAULT_EARLY_TOKENS} tokens" in agreement["evidence"]
    assert f"first {FIRST} at token 0 (words " in agreement["evidence"]


def test_the_kernel_claim_runs_under_the_interpreter_and_says_not_timed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = qualify("--claims", "kernels", "--kernels", "--kernel-batches", "1 3",
                   "--output-dir", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kernels = claim(report(out), "kernels")
    assert kernels["verdict"] == "pass"
    assert kernels["summary"].endswith("under Triton's CPU interpreter, not timed")
    checks = {c["name"]: c for c in kernels["checks"]}
    assert checks["in-place equals float64"]["verdict"] == "pass"
    assert checks["time per call and GB/s"]["verdict"] == "skipped"
    assert checks["time per call and GB/s"]["npu_only"]
    assert {(r["shape"], r["batch"]) for r in kernels["data"]["rows"]} == {
        (s, b) for s in ("35B-A3B TP2", "397B-A17B TP16") for b in (1, 3)
    }
