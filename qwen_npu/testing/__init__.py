"""What tests, the demo and the perf harnesses share: the process harness (processes.py), the
synthetic checkpoint factory (checkpoints.py) and the local tokenizer builder (tokenizer.py).

Standard library only at import time, so it ships in the base install without new dependencies.
"""
