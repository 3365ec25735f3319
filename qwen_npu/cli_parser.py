"""The argument parser every ``qwen-npu <verb>`` uses: a bad flag is one line, not a usage block.

At 3 a.m. ``qwen-npu preflight --tp two`` should say what is wrong and where the help is, in one
line; the full usage stays with ``--help``. Standard library only (the engine image imports it).
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are ``<prog>: <message>; see: <prog> --help``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}; see: {self.prog} --help\n")
