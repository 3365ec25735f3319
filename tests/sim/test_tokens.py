"""Synthetic output: greedy is a function of the prompt, sampling of the seed, garbling repeats."""

from __future__ import annotations

from qwen_npu.sim.tokens import GARBLE_PERIOD, detokenize, stream_for, text_to_ids


def _take(prompt: list[int], n: int, **kw: object) -> list[int]:
    args: dict[str, object] = {
        "greedy": True,
        "seed": 0,
        "request_no": 0,
        "vocab_size": 1000,
        "garble_after": None,
    }
    args.update(kw)
    s = stream_for(prompt, **args)  # type: ignore[arg-type]
    out = s.take(3)
    out += s.take(n - 3)
    return out


def test_greedy_depends_on_the_prompt_only() -> None:
    a = _take([1, 2, 3], 20, request_no=0, seed=1)
    b = _take([1, 2, 3], 20, request_no=99, seed=2)
    c = _take([1, 2, 4], 20)
    assert a == b
    assert a != c
    assert all(0 <= t < 1000 for t in a)


def test_sampled_depends_on_seed_and_request_number() -> None:
    base = _take([1, 2, 3], 20, greedy=False, seed=1, request_no=5)
    assert base == _take([1, 2, 3], 20, greedy=False, seed=1, request_no=5)
    assert base != _take([1, 2, 3], 20, greedy=False, seed=2, request_no=5)
    assert base != _take([1, 2, 3], 20, greedy=False, seed=1, request_no=6)


def test_garbled_output_starts_sane_then_repeats() -> None:
    healthy = _take([5, 6], 40)
    garbled = _take([5, 6], 40, garble_after=6)
    assert garbled[:6] == healthy[:6]
    tail = garbled[6:]
    assert all(tail[i] == tail[i - GARBLE_PERIOD] for i in range(GARBLE_PERIOD, len(tail)))
    assert len(set(healthy)) > 30  # the healthy output does not repeat like that


def test_text_round_trip() -> None:
    ids = _take([9], 10, vocab_size=4096)
    text = detokenize(ids)
    assert text_to_ids(text, 4096) == ids
    assert len(text_to_ids("hello brave new world", 151936)) == 4
