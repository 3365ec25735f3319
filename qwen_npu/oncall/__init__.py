"""``qwen-npu oncall``: the on-call switches over helm, behind ``make status|mtp-off|...``.
Standard library only: a bare ``python3`` in a checkout runs it."""
