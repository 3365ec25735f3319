"""qwen-npu: serve ModelSlim-quantized Qwen3.5/3.6 with MTP on SGLang on Ascend 910.

One CLI, ``qwen-npu <verb>`` (cli.py, the verbs' one list). The parts and what each holds are
listed once, in docs/architecture.md ("The house").
"""

__version__ = "0.1.0"
