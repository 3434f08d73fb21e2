"""Exit codes and the one-line failure every command reports instead of a traceback."""

from __future__ import annotations

__all__ = ["EXIT_CHECK_FAILED", "EXIT_INPUT", "EXIT_NETWORK", "EXIT_OK", "EXIT_USAGE", "CLIError"]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # the command ran, and what it checks does not hold
EXIT_USAGE = 2  # bad arguments (argparse's own code)
EXIT_INPUT = 3  # unreadable capture, unknown dialect, bad request body file
EXIT_NETWORK = 4  # port in use, upstream unreachable


class CLIError(Exception):
    """A failure the user can act on: printed as ``unbroken: <message>``, exits ``code``."""

    def __init__(self, message: str, code: int = EXIT_INPUT) -> None:
        super().__init__(message)
        self.code = code
