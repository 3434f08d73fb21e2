"""``unbroken mock`` and ``unbroken proxy``: the servers, run under uvicorn."""

from __future__ import annotations

import argparse
import socket
from typing import Any

from .errors import EXIT_NETWORK, CLIError

__all__ = ["add_parsers", "ensure_port_free"]


def add_parsers(commands: Any) -> None:
    mock = commands.add_parser(
        "mock",
        help="run the fake upstream (OpenAI, Anthropic, Gemini, Ollama) with faults",
        add_help=False,
        prefix_chars="\0",  # every argument goes to the mock's own parser
    )
    mock.add_argument("args", nargs=argparse.REMAINDER)
    mock.set_defaults(handler=_run_mock)
    proxy = commands.add_parser(
        "proxy",
        help="run the resumable proxy in front of the providers",
        add_help=False,
        prefix_chars="\0",
    )
    proxy.add_argument("args", nargs=argparse.REMAINDER)
    proxy.set_defaults(handler=_run_proxy)


def ensure_port_free(host: str, port: int) -> None:
    """Fail with one clear line before uvicorn would print a traceback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            raise CLIError(f"cannot listen on {host}:{port}: {err.strerror}", EXIT_NETWORK) from err


def _host_port(args: list[str], default_port: int) -> tuple[str, int]:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=default_port)
    known, _ = parser.parse_known_args(args)
    return known.host, known.port


def _run_mock(arguments: argparse.Namespace) -> int:
    from ..mock.__main__ import main as mock_main

    args = list(arguments.args)
    if "-h" not in args and "--help" not in args:
        ensure_port_free(*_host_port(args, 8100))
    return mock_main(args, prog="unbroken mock")


def _run_proxy(arguments: argparse.Namespace) -> int:
    from ..proxy.__main__ import main as proxy_main

    args = list(arguments.args)
    if "-h" not in args and "--help" not in args:
        ensure_port_free(*_host_port(args, 8000))
    return proxy_main(args)
