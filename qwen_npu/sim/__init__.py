"""The SGLang-protocol engine simulator behind ``qwen-npu sim``.

No NPU exists on development and CI machines and a real SGLang server does not start on CPU, yet the
sidecar, the load test, the dashboards and the demo need an engine to talk to. This package speaks
SGLang 0.5.23's HTTP surface and metric names with timings, speculative acceptance, slow starts,
hangs and garbled output that a test can dial in. It is a test and demo tool, never SGLang.
"""
