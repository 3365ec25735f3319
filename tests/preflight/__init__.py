"""Tests of ``qwen-npu preflight`` and the shared config.json reader (a package: see factory.py)."""
