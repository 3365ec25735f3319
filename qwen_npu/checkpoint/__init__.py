"""Readers of a checkpoint folder: config.json (model_config), the ModelSlim quantization
description (modelslim_desc) and the mamba scatter's unified-buffer plan (ub_plan).

They serve the runtime patches, preflight and the sidecar alike, so they live in their own home.
Standard library only: the engine imports them through the patches.
"""
