"""One bench configuration, shared by the CLI, the runner and the locustfile (across processes).

Distributed workers and ``make bench-ui`` build their state from the same record, passed as JSON in
the ``QWEN_NPU_BENCH_CONFIG`` environment variable, so every process sends the same dataset.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from typing import Any

from qwen_npu.loadtest.dataset import DEFAULT_VOCAB_SIZE, DatasetConfig

ENV_VAR = "QWEN_NPU_BENCH_CONFIG"
DEFAULT_TARGET = "http://127.0.0.1:30000"


@dataclass(frozen=True)
class BenchConfig:
    """Everything one run needs. Defaults reproduce the upstream pull request's command."""

    target: str = DEFAULT_TARGET
    api: str = "generate"
    concurrency: int = 10
    num_prompts: int = 100
    input_len: int = 1024
    output_len: int = 100
    range_ratio: float = 1.0
    seed: int = 42
    vocab_size: int = DEFAULT_VOCAB_SIZE
    model: str = "default"
    workers: int = 0
    dataset: str = "random-ids"
    warmup: bool = True
    ready_timeout_s: float = 60.0
    progress_interval_s: float = 2.0
    # Users start this far apart. sglang.benchmark.serving's users are spread by its own
    # per-request setup (a new HTTP session and connection each, about a millisecond); ours send
    # much faster, and a first wave of CONC requests in one burst queues inside the server's HTTP
    # layer, which every request of that wave then reports as TTFT.
    ramp_ms_per_user: float = 1.0
    tag: str | None = None

    def dataset_config(self) -> DatasetConfig:
        return DatasetConfig(
            num_prompts=self.num_prompts,
            input_len=self.input_len,
            output_len=self.output_len,
            range_ratio=self.range_ratio,
            seed=self.seed,
            vocab_size=self.vocab_size,
        )

    def with_concurrency(self, concurrency: int) -> BenchConfig:
        return replace(self, concurrency=concurrency)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BenchConfig:
        data: dict[str, Any] = json.loads(text)
        return cls(**data)

    @classmethod
    def from_env(cls) -> BenchConfig | None:
        text = os.environ.get(ENV_VAR)
        return cls.from_json(text) if text else None
