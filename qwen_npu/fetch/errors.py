"""The fetch's failures: one line each (what, where, the fix) and an exit code.

Why this exists: every way a fetch stops (bad SOURCE, refused token, no space, a file that never
verifies, a full disk) ends as one ``qwen-npu fetch: error: ...`` line and a documented exit code,
never a traceback. docs/runbook.md "A fetch stuck or failing" lists them.
"""

from __future__ import annotations

# The codes every verb shares (qwen_npu.cli_parser, docs/cli.md), as the fetch uses them: 1 the
# transfer or the verification failed after every retry; 2 SOURCE, DEST, a flag, the repo, the
# revision or the credentials; 3 DEST's filesystem cannot hold the checkpoint (before or during the
# fetch); 4 `fetch wait` or the lock wait ran out of time.
from qwen_npu.cli_parser import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_NO_SPACE
from qwen_npu.cli_parser import EXIT_TIMED_OUT as EXIT_TIMEOUT

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_NO_SPACE",
    "EXIT_TIMEOUT",
    "FetchError",
    "TransientError",
]


class FetchError(Exception):
    """A failure the user can act on; ``str()`` is the one line."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class TransientError(Exception):
    """A read that may work when tried again (connection cut, timeout, 5xx, 429)."""
