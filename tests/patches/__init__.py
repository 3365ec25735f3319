"""Tests for qwen_npu.patches; the tree mirrors the patch modules (STYLE.md rule 4)."""
