"""`python -m tools.candidate candidate|snapshot`: behind `make sglang-candidate` and
`make sglang-snapshot` (a maintainer's loop, run from a checkout; the wheel does not carry it)."""

from __future__ import annotations

import sys

from tools.candidate.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
