"""Fixtures of the fetch tests: a hub on 127.0.0.1, moto's S3 server, and an in-process CLI runner.

No test reaches the network: HF_ENDPOINT, MODELSCOPE_ENDPOINT, AWS_ENDPOINT_URL and OBS_ENDPOINT
point at 127.0.0.1, proxies are cleared, and the clients' tokens come only from what a test sets.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fixtures.hubserver import Hub, Repo
from qwen_npu.fetch.cli import main
from qwen_npu.fetch.run import CA_BUNDLE_ENV

# Fast retries: the tests wait for events, and a retry's pause is not one of them.
FAST = ["--no-preflight", "--backoff", "0.01", "--max-backoff", "0.02", "--progress-every", "0.05"]
CLEARED = (
    "HF_TOKEN",
    "HF_ENDPOINT",
    "MODELSCOPE_API_TOKEN",
    "MODELSCOPE_ENDPOINT",
    "MODELSCOPE_DOMAIN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ENDPOINT_URL",
    "AWS_PROFILE",
    "OBS_ACCESS_KEY_ID",
    "OBS_SECRET_ACCESS_KEY",
    "OBS_ENDPOINT",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "https_proxy",
    "http_proxy",
    "ALL_PROXY",
    "QWEN_NPU_FETCH_SECRET",
    "QWEN_NPU_FETCH_SECRET_KEYS",
    "QWEN_NPU_FETCH_CREDENTIALS_DIR",
)
BIG = "model-00001-of-00001.safetensors"


def repo_files(seed: int = 0) -> dict[str, bytes]:
    """A small checkpoint: a 2 MiB shard (several 1 MiB reads), an LFS tokenizer, small files."""
    rnd = random.Random(seed)
    return {
        "config.json": b'{"architectures": ["Qwen3_5MoeForCausalLM"]}',
        BIG: rnd.randbytes(2 * 1024 * 1024 + 12345),
        "tokenizer.json": rnd.randbytes(4096),
        "sub/notes.txt": b"small file, checked by its git blob id on Hugging Face\n",
    }


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    # `--ca-bundle` points the clients at the bundle (qwen_npu.fetch.run.environ_ca_bundle),
    # as it should in a Job; in this test process the names are restored after each test, or the
    # next test in this worker (pip under requests reads REQUESTS_CA_BUNDLE) trusts a test CA only.
    for name in CA_BUNDLE_ENV:
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no stored token is read
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms-cache"))
    monkeypatch.setenv("MODELSCOPE_CREDENTIALS_PATH", str(tmp_path / "ms-credentials"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    with Hub({"org/model": Repo(repo_files())}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("MODELSCOPE_ENDPOINT", server.url)
        yield server


RunFetch = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run_fetch(capsys: pytest.CaptureFixture[str]) -> RunFetch:
    """``qwen-npu fetch ARGS`` in-process: (exit code, stdout, stderr)."""

    def run(*argv: str, fast: bool = True) -> tuple[int, str, str]:
        args = list(argv)
        if fast and args and args[0] not in ("wait", "verify"):
            args += FAST
        code = main(args)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def error_line(err: str) -> str:
    """The one ``qwen-npu fetch: error:`` line (and proof there is no traceback)."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("qwen-npu fetch: error:")]
    assert len(lines) == 1, err
    return lines[0]
