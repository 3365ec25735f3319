"""Tests of the on-call part: docs/runbook.md, the kill-switch make targets (mk/oncall.mk)."""
