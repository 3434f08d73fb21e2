"""``unbroken capture URL -o cap.jsonl``: record a real stream, read by read, with its times.

Credentials given with ``-H`` are sent but never written: the capture redacts them.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rich.live import Live
from rich.text import Text

from ..dialects import DIALECT_NAMES
from ..errors import StreamError
from ..events import Event, TextDelta
from .errors import EXIT_INPUT, EXIT_NETWORK, EXIT_OK, CLIError
from .output import console

__all__ = ["add_parser", "parse_headers", "run"]


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("capture", help="record a real stream to a capture file")
    parser.add_argument("url", help="the streaming endpoint")
    parser.add_argument("-X", "--request", dest="method",
                        help="HTTP method (default: POST with -d, else GET)")
    parser.add_argument("-H", "--header", dest="headers", action="append", default=[],
                        metavar="'NAME: VALUE'", help="a request header (repeatable)")
    parser.add_argument("-d", "--data", help="request body, or @file to read it from a file")
    parser.add_argument("--dialect", default="auto",
                        help=f"auto (default) or one of: {', '.join(DIALECT_NAMES)}")
    parser.add_argument("-o", "--output", required=True, help="capture file to write")
    parser.add_argument("--idle-timeout", type=float, default=30.0)
    parser.add_argument("--first-event-timeout", type=float, default=60.0)
    parser.add_argument("--json", action="store_true", help="print a JSON summary, no live view")
    parser.set_defaults(handler=run)


def parse_headers(raw: list[str]) -> dict[str, str]:
    """`-H "Name: value"` arguments as headers (capture, inspect and replay share them)."""
    headers: dict[str, str] = {}
    for item in raw:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise CLIError(f"bad header {item!r}: expected 'Name: value'", EXIT_INPUT)
        headers[name.strip()] = value.strip()
    return headers


def _body(data: str | None) -> bytes | None:
    if data is None:
        return None
    if data.startswith("@"):
        path = Path(data[1:])
        try:
            return path.read_bytes()
        except OSError as err:
            raise CLIError(f"cannot read request body {path}: {err.strerror}", EXIT_INPUT) from err
    return data.encode("utf-8")


def run(arguments: argparse.Namespace) -> int:
    from ..client import Retry, stream

    if arguments.dialect != "auto" and arguments.dialect not in DIALECT_NAMES:
        raise CLIError(f"unknown dialect {arguments.dialect!r}; expected auto or one of "
                       f"{', '.join(DIALECT_NAMES)}", EXIT_INPUT)
    headers = parse_headers(arguments.headers)
    body = _body(arguments.data)
    if body is not None and not any(k.lower() == "content-type" for k in headers):
        headers["content-type"] = "application/json"
    method = arguments.method or ("POST" if body is not None else "GET")
    frames = chars = 0
    started = time.monotonic()
    out = console()

    def view(status: str) -> Text:
        line = Text(f"{status}: {frames} events, {chars} characters, "
                    f"{time.monotonic() - started:.1f}s → {arguments.output}")
        return line

    try:
        with (
            stream(method, arguments.url, dialect=arguments.dialect, content=body,
                   headers=headers, retry=Retry(attempts=1, budget=None), resume="none",
                   idle_timeout=arguments.idle_timeout,
                   first_event_timeout=arguments.first_event_timeout, raise_on_error=False,
                   capture=arguments.output) as s,
            Live(view("recording"), console=out, transient=arguments.json,
                 refresh_per_second=8, redirect_stdout=False) as live,
        ):
            event: Event
            for event in s:
                frames += 1
                if event.__class__ is TextDelta:
                    chars += len(event.text)
                live.update(view("recording"))
            message = s.message
            live.update(view(message.status.value))
    except StreamError as err:
        raise CLIError(f"capture failed: {err}", EXIT_NETWORK) from err
    summary = {
        "output": arguments.output,
        "connections": s.connections,
        "status": message.status.value,
        "finish_reason": message.finish_reason.value if message.finish_reason else None,
        "raw_finish_reason": message.raw_finish_reason,
        "error": None if message.error is None else str(message.error),
        "characters": len(message.text),
    }
    if arguments.json:
        print(json.dumps(summary, ensure_ascii=False))
    else:
        out.print(f"status {summary['status']}, finish reason {summary['finish_reason']} "
                  f"(raw {summary['raw_finish_reason']!r})"
                  + (f", error: {summary['error']}" if summary["error"] else ""))
        out.print(f"inspect it: unbroken inspect {arguments.output}")
    return EXIT_OK
