"""The fetch's failures: one line each (what, where, the fix) and an exit code.

Why this exists: every way a fetch stops (bad SOURCE, refused token, no space, a file that never
verifies, a full disk) ends as one ``qwen-npu fetch: error: ...`` line and a documented exit code,
never a traceback. docs/runbook.md "A fetch stuck or failing" lists them.
"""

from __future__ import annotations

EXIT_FAILED = 1  # the transfer or the verification failed after every retry
EXIT_BAD_INPUT = 2  # SOURCE, DEST, a flag, the repo, the revision or the credentials
EXIT_NO_SPACE = 3  # DEST's filesystem cannot hold the checkpoint (before or during the fetch)
EXIT_TIMEOUT = 4  # `fetch wait` or the lock wait ran out of time


class FetchError(Exception):
    """A failure the user can act on; ``str()`` is the one line."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class TransientError(Exception):
    """A read that may work when tried again (connection cut, timeout, 5xx, 429)."""
