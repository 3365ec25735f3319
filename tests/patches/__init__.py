"""Tests for qwen_npu.patches; the tree mirrors the patch modules (tests/test_repository.py)."""
