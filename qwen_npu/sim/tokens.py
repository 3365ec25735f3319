"""Deterministic stand-in output: token ids, their text, and the garbled (repeating) variant.

Greedy output is a function of the prompt's ids alone, so a canary can record a golden answer;
sampled output one of the seed and the arrival number; garbled output the upstream pull request's
failure (a sane start, then a short loop forever).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

_MASK = (1 << 64) - 1
_SYLLABLES = (
    "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "be", "da", "fu", "go", "hi", "jo", "pe", "zu",
)  # fmt: skip
# 16**3 = 4096 pronounceable words; token id t reads as WORDS[t % 4096], with a leading space.
WORDS: tuple[str, ...] = tuple(
    " " + a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES
)
_WORD_TO_ID = {w.strip(): i for i, w in enumerate(WORDS)}
GARBLE_PERIOD = 3


def splitmix64(x: int) -> int:
    """One step of SplitMix64: a fast, well-mixed 64-bit hash of an integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def prompt_hash(ids: list[int]) -> int:
    """A stable 64-bit digest of the prompt's token ids."""
    data = array("q", ids).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def text_to_ids(text: str, vocab_size: int) -> list[int]:
    """Tokenize text the simulator's way: one token per whitespace-separated word.

    Words the simulator itself produced map back to their own ids, so feeding output back in is
    stable; other words hash into the vocabulary.
    """
    ids: list[int] = []
    for word in text.split():
        known = _WORD_TO_ID.get(word)
        if known is not None and known < vocab_size:
            ids.append(known)
        else:
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            ids.append(int.from_bytes(digest, "little") % vocab_size)
    return ids


class TokenStream:
    """The output tokens of one request, produced on demand."""

    __slots__ = ("_base", "_garble_after", "_vocab", "ids")

    def __init__(self, base: int, vocab_size: int, garble_after: int | None) -> None:
        self._base = base
        self._vocab = vocab_size
        self._garble_after = garble_after
        self.ids: list[int] = []

    def take(self, n: int) -> list[int]:
        """The next n token ids (appended to ``ids``)."""
        out = self.ids
        start = len(out)
        g = self._garble_after
        for j in range(start, start + n):
            if g is not None and j >= g + GARBLE_PERIOD:
                out.append(out[j - GARBLE_PERIOD])
            else:
                out.append(splitmix64(self._base + j) % self._vocab)
        return out[start:]


def stream_for(
    prompt_ids: list[int],
    *,
    greedy: bool,
    seed: int,
    request_no: int,
    vocab_size: int,
    garble_after: int | None,
) -> TokenStream:
    """The output of one request: greedy depends on the prompt alone, sampled on seed and number.

    ``garble_after`` (None = healthy) makes the output repeat its last few tokens after that many.
    """
    if greedy:
        base = prompt_hash(prompt_ids)
    else:
        base = splitmix64((seed << 32) ^ request_no ^ prompt_hash(prompt_ids))
    return TokenStream(base, vocab_size, garble_after)


def detokenize(ids: Sequence[int]) -> str:
    """The text of token ids (``WORDS``), as every response of the simulator writes it."""
    return "".join([WORDS[t & 4095] for t in ids])
