"""The ``random-ids`` dataset, built as sglang.benchmark.serving 0.5.23 builds it.

A bench that claims to reproduce the upstream table (``--tokenize-prompt``) must send the same
token ids for the same seed; the recipe is in docs/loadtest.md, written here in our own code.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Qwen3 / Qwen3.5 tokenizers' base vocabulary (without added tokens): used only when neither
# --tokenizer nor --vocab-size is given, which the run says.
DEFAULT_VOCAB_SIZE = 151643
DATASETS = ("random-ids",)


@dataclass(frozen=True)
class DatasetRow:
    prompt: list[int]
    prompt_len: int
    output_len: int


@dataclass(frozen=True)
class DatasetConfig:
    num_prompts: int = 100
    input_len: int = 1024
    output_len: int = 100
    range_ratio: float = 1.0
    seed: int = 42
    vocab_size: int = DEFAULT_VOCAB_SIZE  # the numbers are checked by every entry's flag types


def _lens(full_len: int, range_ratio: float, num: int) -> list[int]:
    low = max(int(full_len * range_ratio), 1)
    return [int(x) for x in np.random.randint(low, full_len + 1, size=num)]


def load(c: DatasetConfig) -> list[DatasetRow]:
    """The measured rows in order: seed both generators, input lengths, output lengths, offsets."""
    random.seed(c.seed)
    np.random.seed(c.seed)
    input_lens = _lens(c.input_len, c.range_ratio, c.num_prompts)
    output_lens = _lens(c.output_len, c.range_ratio, c.num_prompts)
    offsets = np.random.randint(0, c.vocab_size, size=c.num_prompts)
    return [
        DatasetRow(
            [(int(offsets[i]) + i + j) % c.vocab_size for j in range(input_lens[i])],
            input_lens[i],
            output_lens[i],
        )
        for i in range(c.num_prompts)
    ]


def vocab_size_from_tokenizer(path: str | Path) -> int:
    """``tokenizer.vocab_size`` as transformers reports it (no added tokens)."""
    # lazy: an extra's (pyproject.toml); the base install goes without
    from tokenizers import Tokenizer

    p = Path(path)
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise ValueError(
            f"{file}: no tokenizer.json; pass --tokenizer <folder with tokenizer.json> "
            "or --vocab-size N"
        )
    try:
        return int(Tokenizer.from_file(str(file)).get_vocab_size(with_added_tokens=False))
    except Exception as exc:
        raise ValueError(f"{file}: not a readable tokenizer.json ({exc})") from None
