"""One bench configuration, shared by the CLI, the runner and the locustfile (across processes).

Distributed workers and ``make bench-ui`` build their state from the same record, passed as JSON in
the ``QWEN_NPU_BENCH_CONFIG`` environment variable, so every process sends the same dataset.

The dataset's own numbers (prompts, lengths, ratio, seed, vocabulary) live in one
``DatasetConfig`` that the bench config holds (``config.data``); the flat names
(``config.num_prompts`` ...) read through to it, so the callers say what they mean.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from qwen_npu.loadtest.dataset import DatasetConfig
from qwen_npu.ports import LOCAL_ENGINE_URL

ENV_VAR = "QWEN_NPU_BENCH_CONFIG"
DEFAULT_TARGET = LOCAL_ENGINE_URL


@dataclass(frozen=True)
class BenchConfig:
    """Everything one run needs. Defaults reproduce the upstream pull request's command."""

    target: str = DEFAULT_TARGET
    api: str = "generate"
    concurrency: int = 10
    data: DatasetConfig = field(default_factory=DatasetConfig)
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

    # The dataset's numbers, read through (one place holds them: ``data``).
    @property
    def num_prompts(self) -> int:
        return self.data.num_prompts

    @property
    def input_len(self) -> int:
        return self.data.input_len

    @property
    def output_len(self) -> int:
        return self.data.output_len

    @property
    def range_ratio(self) -> float:
        return self.data.range_ratio

    @property
    def seed(self) -> int:
        return self.data.seed

    @property
    def vocab_size(self) -> int:
        return self.data.vocab_size

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BenchConfig:
        data: dict[str, Any] = json.loads(text)
        return cls(**{**data, "data": DatasetConfig(**data["data"])})

    @classmethod
    def from_env(cls) -> BenchConfig | None:
        text = os.environ.get(ENV_VAR)
        return cls.from_json(text) if text else None
