"""Entry point: ``unbroken <command> ...`` and ``python -m unbroken``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from .._version import __version__
from .errors import EXIT_USAGE, CLIError

__all__ = ["main"]

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="unbroken",
        description="Receive LLM streaming output correctly: see, record, inspect and replay "
        "streams, and run the resumable proxy.",
    )
    parser.add_argument("--version", action="version", version=f"unbroken {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    from . import capture, demo, inspect, replay, servers, streams

    demo.add_parser(commands)
    capture.add_parser(commands)
    inspect.add_parser(commands)
    replay.add_parser(commands)
    servers.add_parsers(commands)
    streams.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    handler: Handler | None = getattr(arguments, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return handler(arguments)
    except CLIError as err:
        print(f"unbroken: {err}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        print("unbroken: interrupted", file=sys.stderr)
        return 130
