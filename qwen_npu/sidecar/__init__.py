"""The health and metrics sidecar (``qwen-npu sidecar``, port 9400), beside the engine; never in
the request path (docs/sidecar.md)."""
