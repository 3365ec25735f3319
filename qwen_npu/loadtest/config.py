"""One bench run's settings and the flags that shape its requests, shared by the CLI, the runner
and the locustfile.

The workers of a distributed run read it as JSON from ``QWEN_NPU_BENCH_CONFIG``, so every process
sends the same dataset.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from qwen_npu.cli_parser import Number, non_negative_int, positive_int, unit_interval
from qwen_npu.loadtest.backends import BACKEND_MAPPING
from qwen_npu.loadtest.dataset import DEFAULT_VOCAB_SIZE, DatasetConfig, vocab_size_from_tokenizer
from qwen_npu.ports import LOCAL_ENGINE_URL

ENV_VAR = "QWEN_NPU_BENCH_CONFIG"


@dataclass(frozen=True)
class BenchConfig:
    """Defaults reproduce the upstream pull request's command."""

    target: str = LOCAL_ENGINE_URL
    api: str = "generate"
    concurrency: int = 10
    data: DatasetConfig = field(default_factory=DatasetConfig)
    model: str = "default"
    workers: int = 0
    dataset: str = "random-ids"
    warmup: bool = True
    ready_timeout_s: float = 60.0
    # Users start this far apart. sglang.benchmark.serving's users are spread by its own
    # per-request setup (a new HTTP session and connection each, about a millisecond); ours send
    # much faster, and a first wave of CONC requests in one burst queues inside the server's HTTP
    # layer, which every request of that wave then reports as TTFT.
    ramp_ms_per_user: float = 1.0
    tag: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> BenchConfig | None:
        text = os.environ.get(ENV_VAR)
        if not text:
            return None
        fields = json.loads(text)
        return cls(**{**fields, "data": DatasetConfig(**fields["data"])})


DATA_FLAGS = ("num_prompts", "input_len", "output_len", "range_ratio", "seed")


def add_request_flags(p: Any) -> None:
    """What shapes the requests: the bench's flags, and ``make bench-ui``'s (locust's parser)."""
    d = DatasetConfig()
    p.add_argument("--api", default="generate", choices=sorted(BACKEND_MAPPING))
    p.add_argument("--num-prompts", type=positive_int, default=d.num_prompts)
    p.add_argument("--input-len", type=positive_int, default=d.input_len)
    p.add_argument("--output-len", type=positive_int, default=d.output_len)
    p.add_argument("--range-ratio", type=unit_interval, default=d.range_ratio)
    p.add_argument("--seed", type=non_negative_int, default=d.seed)
    p.add_argument(
        "--tokenizer", metavar="DIR", default=None, help="folder with tokenizer.json (vocab size)"
    )
    p.add_argument(
        "--vocab-size",
        type=Number(int, low=2, what="an integer of 2 or more"),
        default=None,
        help=f"token-id range when no --tokenizer (default {DEFAULT_VOCAB_SIZE})",
    )


def data_from_args(args: argparse.Namespace) -> DatasetConfig:
    if args.tokenizer and args.vocab_size is not None:
        raise ValueError("pass --tokenizer or --vocab-size, not both")
    vocab = (
        vocab_size_from_tokenizer(args.tokenizer)
        if args.tokenizer
        else (args.vocab_size or DEFAULT_VOCAB_SIZE)
    )
    return DatasetConfig(**{k: getattr(args, k) for k in DATA_FLAGS}, vocab_size=vocab)
