"""Terminal output with rich, on stdout; plain text when stdout is not a terminal."""

from __future__ import annotations

from rich.console import Console

__all__ = ["console"]


def console() -> Console:
    return Console(highlight=False, soft_wrap=False)
