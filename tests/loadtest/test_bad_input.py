"""What `make bench` says to wrong input: one line, the right exit code, no traceback, no wait."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .benchrun import bench

CLOSED = "http://127.0.0.1:9"


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if not line.startswith("qwen_npu.bench ")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture()
def answers_404() -> Iterator[tuple[str, list[str]]]:
    """A server answering 404 to everything; the paths asked, in order."""
    asked: list[str] = []

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_bad_concurrency_is_one_line_exit_2(tmp_path: Path) -> None:
    proc, recs = bench(CLOSED, tmp_path / "b.jsonl", "--concurrency", "abc")
    assert proc.returncode == 2 and recs == []
    assert one_line(proc.stderr) == (
        "qwen-npu bench: error: argument --concurrency/-c: 'abc' is not an integer of 1 or more; "
        "see: qwen-npu bench --help"
    )


def test_a_missing_baseline_is_one_line_before_any_wait(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    proc, recs = bench(CLOSED, tmp_path / "b.jsonl", "--baseline", str(missing))
    assert proc.returncode == 2 and recs == []
    assert one_line(proc.stderr) == (
        f"qwen-npu bench: error: --baseline {missing}: no such file; pass a JSONL an earlier bench "
        "wrote (--output; make bench: out/bench/bench.jsonl) or drop --baseline"
    )


def test_a_corrupt_baseline_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"max_concurrency": 1}\n{oops\n')
    proc, _ = bench(CLOSED, tmp_path / "b.jsonl", "--baseline", str(bad))
    assert proc.returncode == 2
    assert one_line(proc.stderr).startswith(f"qwen-npu bench: error: {bad}:2: not a JSON line")


def test_a_url_that_answers_404_fails_at_once(
    answers_404: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, asked = answers_404
    proc, recs = bench(url, tmp_path / "b.jsonl", "--ready-timeout", "60")
    assert proc.returncode == 1 and recs == []
    assert asked == ["/v1/models"]  # asked once, not again until the 60 s ready wait ends
    logged = [line for line in proc.stderr.splitlines() if line.startswith("qwen_npu.bench ")]
    said = [line for line in proc.stderr.splitlines() if line not in logged]
    waiting = "qwen_npu.bench level=INFO event=waiting_for_target url="
    assert [line for line in logged if line.startswith(waiting + url + "/v1/models")]
    assert said == [
        f"qwen-npu bench: error: --target {url} answers HTTP 404 to GET /v1/models: it is "
        "not an SGLang server's base URL; pass --target http://<host>:<port> (no path)"
    ]
