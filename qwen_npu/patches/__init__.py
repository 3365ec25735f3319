"""Runtime patches for SGLang on Ascend, and the pure decision logic they share with preflight.

Standard library only: this package is installed inside the engine image.
"""
