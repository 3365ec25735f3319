"""Publishing qwen-npu: images and chart to an OCI registry, digest-pinned and signed, and a bundle
a closed site carries in (issue 26, docs/images.md "Releases" and docs/chart.md "Installing").

Why a package of its own: `make release`, `make bundle`, `make bundle-load` and `make model-image`
share one registry client (registry.py), one OCI layout reader/writer (oci.py), one signing and
policy module (signing.py) and one chart pinning step (chart.py); one module per verb strings them
together (publish.py: release; bundle.py: bundle, bundle-load; model.py: model-image; common.py
what they share) and __main__.py is the one command line (`python -m tools.release <verb>`).

Every failure is a ReleaseError: one line naming what failed and what to do next; the command
line prints it and exits 1, never a traceback.
"""

from __future__ import annotations


class ReleaseError(Exception):
    """A release, bundle or model-image step failed; the message is the one line to print."""
