"""The SGLang-protocol engine simulator behind ``qwen-npu sim``: no NPU here and SGLang does not
serve on CPU, yet the sidecar, the load test, the dashboards and the demo need an engine to talk to.
SGLang 0.5.23's HTTP surface and metric names, with dialable timings, acceptance and faults.
"""
