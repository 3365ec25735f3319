"""Facts about the Ascend hardware the engine runs on (unified-buffer tiling, chips).

Why this exists apart from checkpoint/: these rules depend on the chip, not on what a checkpoint
holds; the patches, preflight and the sidecar read them from here. Standard library only.
"""
