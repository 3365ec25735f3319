"""One bench run's settings, shared by the CLI, the runner and the locustfile.

The workers of a distributed run read it as JSON from ``QWEN_NPU_BENCH_CONFIG``, so every process
sends the same dataset.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from qwen_npu.loadtest.dataset import DatasetConfig
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
