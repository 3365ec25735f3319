"""Runtime patches for SGLang on Ascend. Standard library only: the engine image imports it."""
