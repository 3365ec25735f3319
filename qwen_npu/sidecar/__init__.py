"""The health and metrics sidecar (``qwen-npu sidecar``, port 9400).

It runs in the engine's pod and never sits in the request path: a background poller probes the
engine, reads the patches' state file and runs the output-quality canary; the kubelet's probes and
Prometheus' scrapes are answered from that cached state in a few milliseconds, also while the engine
hangs. docs/sidecar.md documents the probe semantics, every setting and every metric.
"""
