"""Exit statuses and one-line usage errors, shared by the command lines (flow-train, flow-generate)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "OneLineErrorParser"]

EXIT_FAILURE = 1
EXIT_USAGE = 2


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse whose errors are one line (``prog: error: ...``) instead of usage plus message."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
