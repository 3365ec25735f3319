"""Readers of a checkpoint folder shared by the patches, preflight and the sidecar (stdlib only)."""
