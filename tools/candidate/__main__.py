"""`python -m tools.candidate candidate|snapshot`, behind `make sglang-candidate` and
`make sglang-snapshot` (a maintainer's loop, run from a checkout; the wheel does not carry it)."""

import sys

from qwen_npu.cli_parser import run_verb
from tools.candidate.run import main

if __name__ == "__main__":
    sys.exit(run_verb("python -m tools.candidate", main, sys.argv[1:]))
