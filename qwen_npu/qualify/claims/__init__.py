"""The claims, one module each, in the order they run and appear in the report.

``start`` (the engine came up as the mode needs), ``answers`` (greedy outputs sane, and equal to a
second endpoint's), ``accuracy`` (a staged GSM8K-format set), ``speed`` (the upstream benchmark's
shape against the pull request's table; the MTP pay-off against a second endpoint), ``kernels``
(the decode kernel: correct everywhere, timed on an NPU).
"""

from __future__ import annotations

CLAIMS = ("start", "answers", "accuracy", "speed", "kernels")
