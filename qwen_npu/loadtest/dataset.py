"""The request datasets of the load test, built as sglang.benchmark.serving 0.5.23 builds them.

The upstream pull request's table comes from ``--dataset-name random-ids --tokenize-prompt``; a
bench that claims to reproduce it must send the same token ids for the same seed. SGLang's recipe
(the facts, written here in our own code): seed Python's and numpy's global generators with the
seed, draw input lengths, then output lengths, with ``randint(max(int(L * r), 1), L + 1)``, then one
offset per request from ``randint(0, vocab_size)``; request i, position j holds ``(offset_i + i + j)
% vocab``.

Datasets live behind a registry (``DATASET_MAPPING`` / ``get_dataset``) so another one (a trace
replay, a chat set) is one class, not a fork of the runner.
"""

from __future__ import annotations

import json
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Qwen3 / Qwen3.5 tokenizers' base vocabulary (tokenizer.vocab_size without added tokens). Used
# only when neither --tokenizer nor --vocab-size is given; the ids then match SGLang's only for a
# tokenizer of this size, which the run logs.
DEFAULT_VOCAB_SIZE = 151643


class DatasetError(ValueError):
    """Bad dataset input; the message names the file or option and the fix."""


@dataclass(frozen=True)
class DatasetRow:
    """One request: the prompt (token ids), its length and the number of tokens to generate."""

    prompt: list[int]
    prompt_len: int
    output_len: int


@dataclass(frozen=True)
class DatasetConfig:
    """What a dataset needs; the CLI fills it from its flags."""

    num_prompts: int = 100
    input_len: int = 1024
    output_len: int = 100
    range_ratio: float = 1.0
    seed: int = 42
    vocab_size: int = DEFAULT_VOCAB_SIZE


class Dataset(ABC):
    """A dataset contract: built from a config, loads the measured rows in order."""

    @classmethod
    @abstractmethod
    def from_config(cls, config: DatasetConfig) -> Dataset: ...

    @abstractmethod
    def load(self) -> list[DatasetRow]: ...


def random_lens(full_len: int, range_ratio: float, num: int) -> list[int]:
    """Lengths uniform in [max(int(full*r), 1), full] from numpy's global generator (SGLang's)."""
    if full_len <= 0:
        return [0] * num
    low = max(int(full_len * range_ratio), 1)
    return [int(x) for x in np.random.randint(low, full_len + 1, size=num)]


@dataclass(frozen=True)
class RandomIdsDataset(Dataset):
    """``random-ids`` with ``--tokenize-prompt``: consecutive token ids from a random offset."""

    config: DatasetConfig

    @classmethod
    def from_config(cls, config: DatasetConfig) -> RandomIdsDataset:
        if config.num_prompts < 1:
            raise DatasetError(f"--num-prompts {config.num_prompts}: must be at least 1")
        if config.input_len < 1 or config.output_len < 1:
            raise DatasetError(
                f"--input-len {config.input_len} --output-len {config.output_len}: both must be "
                ">= 1"
            )
        if not 0.0 <= config.range_ratio <= 1.0:
            raise DatasetError(f"--range-ratio {config.range_ratio}: must be within 0..1")
        if config.vocab_size < 2:
            raise DatasetError(f"--vocab-size {config.vocab_size}: must be at least 2")
        return cls(config)

    def load(self) -> list[DatasetRow]:
        c = self.config
        # Same order of draws as sglang.benchmark.serving: seed both generators, input lengths,
        # output lengths, offsets.
        random.seed(c.seed)
        np.random.seed(c.seed)
        input_lens = random_lens(c.input_len, c.range_ratio, c.num_prompts)
        output_lens = random_lens(c.output_len, c.range_ratio, c.num_prompts)
        offsets = np.random.randint(0, c.vocab_size, size=c.num_prompts)
        rows = []
        for i in range(c.num_prompts):
            base = int(offsets[i]) + i
            ids = [(base + j) % c.vocab_size for j in range(input_lens[i])]
            rows.append(DatasetRow(prompt=ids, prompt_len=input_lens[i], output_len=output_lens[i]))
        return rows


DATASET_MAPPING: dict[str, type[Dataset]] = {"random-ids": RandomIdsDataset}


def get_dataset(name: str, config: DatasetConfig) -> Dataset:
    """The dataset registered under ``name``; unknown names raise with the list of known ones."""
    try:
        cls = DATASET_MAPPING[name]
    except KeyError:
        known = ", ".join(sorted(DATASET_MAPPING))
        raise DatasetError(f"dataset {name!r} is not known; use one of: {known}") from None
    return cls.from_config(config)


def vocab_size_from_tokenizer(path: str | Path) -> int:
    """``tokenizer.vocab_size`` as transformers reports it: the base vocabulary, no added tokens.

    Reads ``tokenizer.json`` (a folder or the file) with the ``tokenizers`` library, which is what a
    fast Hugging Face tokenizer wraps; no transformers or torch needed.
    """
    p = Path(path)
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise DatasetError(
            f"{file}: no tokenizer.json; pass --tokenizer <folder with tokenizer.json> "
            "or --vocab-size N"
        )
    try:
        # lazy: an extra's (pyproject.toml); the base install goes without
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - tokenizers comes with the bench extra
        return _vocab_size_from_json(file)
    try:
        return int(Tokenizer.from_file(str(file)).get_vocab_size(with_added_tokens=False))
    except Exception as exc:
        raise DatasetError(f"{file}: not a readable tokenizer.json ({exc})") from None


def _vocab_size_from_json(file: Path) -> int:
    data = json.loads(file.read_text())
    vocab = data.get("model", {}).get("vocab")
    if not isinstance(vocab, dict | list):
        raise DatasetError(f"{file}: key model.vocab missing; pass --vocab-size N instead")
    return len(vocab)
