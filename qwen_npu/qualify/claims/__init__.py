"""The claims, one module each, in the order they run and appear in the report.

``start`` (the engine came up as the mode needs), ``answers`` (greedy outputs sane, and equal to a
second endpoint's), ``accuracy`` (a staged GSM8K-format set), ``speed`` (the upstream benchmark's
shape against the pull request's table; the MTP pay-off against a second endpoint), ``kernels``
(the decode kernel: correct everywhere, timed on an NPU). The verb imports a claim's module only
when the claim runs: each needs other libraries (the canary's, the bench's, torch).
"""

from __future__ import annotations

CLAIMS = ("start", "answers", "accuracy", "speed", "kernels")
#: The answers claim: a divergence from the compare side inside this many tokens fails
#: (answers.py says why; here so the verb's parser needs no claim's libraries).
EARLY_TOKENS = 16
#: The kernels claim's batch sizes (kernels.py).
KERNEL_BATCHES = (1, 32, 128)
