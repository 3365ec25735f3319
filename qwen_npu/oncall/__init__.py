"""``qwen-npu oncall``: the on-call switches over helm (status, mtp-off/on, patch-off/on, rollback).

Why this exists: at 3 a.m. a switch must change one value as a new helm revision, wait until the
engine serves again and say what to do next when it does not. The names of the release's objects
and the engine's workload kind (Deployment or LeaderWorkerSet) are read from the release's own
manifest (``release.py``), so nameOverride, fullnameOverride and multi-node releases need nothing
by hand. ``make mtp-off`` and the other targets of mk/oncall.mk call it. Standard library only: a
bare ``python3`` in a checkout runs it.
"""
