"""Readers of a checkpoint folder: config.json (model_config) and the ModelSlim quantization
description (modelslim_desc).

They serve the runtime patches, preflight and the sidecar alike, so they live in their own home.
Standard library only: the engine imports them through the patches. The unified-buffer plan is a
rule of the chip, not of the checkpoint: it lives in qwen_npu/hardware/.
"""
