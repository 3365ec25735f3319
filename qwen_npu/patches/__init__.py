"""Runtime patches for SGLang on Ascend: one module per fix, the registry, the state file, the hook.

Standard library only: this package is installed inside the engine image.
"""
