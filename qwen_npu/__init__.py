"""qwen-npu: serve ModelSlim-quantized Qwen3.5/3.6 with MTP on SGLang on Ascend 910.

Subpackages: ``patches`` (runtime fixes for SGLang, preflight, UB planning; standard library
only), ``serve`` (sidecar, simulator, metric lists, dashboards and alerts), ``loadtest``
(`make bench`).
"""

__version__ = "0.1.0"
