"""The stream readers on scripted chunks and a scripted clock: sglang.benchmark.serving's rules."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from qwen_npu.loadtest import backends
from qwen_npu.loadtest.backends import (
    GenerateBackend,
    OpenAIBackend,
    RequestOutput,
    scan_generate_chunk,
)


def gen_chunk(text: str, tokens: int, verify: int | None = None) -> bytes:
    meta: dict[str, object] = {"id": "x", "prompt_tokens": 4, "completion_tokens": tokens}
    if verify is not None:
        meta["spec_verify_ct"] = verify
    body = json.dumps({"text": text, "output_ids": [1] * tokens, "meta_info": meta},
                      separators=(",", ":"))  # fmt: skip
    return b"data: " + body.encode()


def scripted_clock(monkeypatch: pytest.MonkeyPatch, times: list[float]) -> None:
    it: Iterator[float] = iter(times)
    monkeypatch.setattr(backends.time, "perf_counter", lambda: next(it))


def test_generate_reader_times_and_splits_multi_token_chunks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = [
        gen_chunk("", 0),  # an empty first chunk does not count as the first token
        b"",
        gen_chunk("a", 1),
        gen_chunk("a b c", 3, verify=1),  # one chunk carrying 2 new tokens
        gen_chunk("a b c", 3, verify=1),  # no new token: ignored, clock not advanced
        gen_chunk("a b c d", 4, verify=2),
        b"data: [DONE]",
    ]
    # One clock reading per non-empty line, in order.
    scripted_clock(monkeypatch, [0.010, 0.050, 0.070, 0.075, 0.080, 0.090])
    out = RequestOutput()
    GenerateBackend().read_stream(iter(lines), 0.0, out)
    assert out.ttft == pytest.approx(0.050)
    assert out.itl == pytest.approx([0.010, 0.010, 0.010])
    assert out.latency == pytest.approx(0.090)  # the [DONE] line ends the request
    assert out.output_len == 4 and out.spec_verify_ct == 2 and not out.error


def test_openai_reader_one_gap_per_chunk_and_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    def c(text: str) -> bytes:
        return b"data: " + json.dumps({"choices": [{"text": text, "index": 0}]}).encode()

    usage = b"data: " + json.dumps({"choices": [], "usage": {"completion_tokens": 3}}).encode()
    scripted_clock(monkeypatch, [0.04, 0.05, 0.07, 0.08, 0.09])
    out = RequestOutput()
    OpenAIBackend().read_stream(iter([c("x"), c("y"), c("z"), usage, b"data: [DONE]"]), 0.0, out)
    assert out.ttft == pytest.approx(0.04)
    assert out.itl == pytest.approx([0.01, 0.02])
    assert out.output_len == 3 and out.latency == pytest.approx(0.09)


def test_error_chunk_fails_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    scripted_clock(monkeypatch, [0.01, 0.02])
    out = RequestOutput()
    err = b'data: {"error": {"message": "aborted"}}'
    GenerateBackend().read_stream(iter([gen_chunk("a", 1), err]), 0.0, out)
    assert out.error == "server error in stream"


def test_scan_matches_json_decoding_on_awkward_chunks() -> None:
    tricky = 'he said \\"completion_tokens\\":999 {"text":""'
    for data in (
        gen_chunk(tricky, 7, verify=3)[6:],
        gen_chunk("", 0)[6:],
        b'{ "meta_info": {"completion_tokens": 5}, "text": "spaced" }',  # not compact: JSON path
        b'{"text":"\\"quoted","meta_info":{"completion_tokens":2}}',
    ):
        chunk = json.loads(data)
        meta = chunk.get("meta_info", {})
        expected = (bool(chunk["text"]), meta.get("completion_tokens"), meta.get("spec_verify_ct"))
        assert scan_generate_chunk(data) == expected, data
    assert scan_generate_chunk(b'{"error":"boom"}') is None
