"""What tests (and the perf harnesses in tools/perf) share and the product never imports.

checkpoints.py writes synthetic ModelSlim checkpoints (no weights); tokenizer.py builds a tiny local
Hugging Face tokenizer. The process harness the demo and the load test use at run time is
qwen_npu/processes.py.
"""
