"""Publishing qwen-npu (issue 26; docs/images.md "Releases"): the images and the chart to an OCI
registry, digest-pinned and signed, and the bundle a closed site carries in. One module per verb
(publish, bundle, model) over what they share (registry, oci, signing, chart);
`python -m tools.release <verb>` is the command line. Every failure is a ReleaseError: one line
naming what failed and what to do next, printed with exit 1, never a traceback.
"""

from qwen_npu.log import PartLog

log = PartLog("release")


class ReleaseError(Exception):
    """A release, bundle or model-image step failed; the message is the one line to print."""
