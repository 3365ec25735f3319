"""Builds a tiny local Hugging Face tokenizer folder with the ``tokenizers`` library."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

BASE_VOCAB = 997  # a prime, so modulo wrap-around is exercised
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_tokenizer(folder: Path, base_vocab: int = BASE_VOCAB) -> Path:
    """Write tokenizer.json + tokenizer_config.json + config.json; return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {f"w{i}": i for i in range(base_vocab - 1)}
    vocab["[UNK]"] = base_vocab - 1
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "unk_token": "[UNK]",
                "eos_token": "<|endoftext|>",
                "model_max_length": 1000000,
                "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
            }
        )
    )
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen2",
                "architectures": ["Qwen2ForCausalLM"],
                "vocab_size": base_vocab + len(SPECIALS),
            }
        )
    )
    return folder
