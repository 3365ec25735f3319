"""``qwen-npu preflight``: tell in a second, before a long model load, whether a checkpoint starts.

Reads the checkpoint's small files (config.json, quant_model_description.json, the weight index,
the tokenizer files) and reuses the patches' own rules (``modelslim_desc``, ``ub_plan``,
``registry``, ``model_config``). Standard library only: it runs in the engine image's init
container, where it judges the engine's command line as the chart rendered it
(``engine_args.read_engine_args``). Entry points: ``run_preflight`` (the report), ``cli.main`` (the
verb).
"""

from __future__ import annotations

from qwen_npu.preflight.rules import Options, Report, run_preflight

__all__ = ["Options", "Report", "run_preflight"]
