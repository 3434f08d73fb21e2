"""``unbroken inspect cap.jsonl``: why did the stream stop at half a sentence?

Three columns per frame — raw lines | parsed delta | committed position (seq, bytes, time) —
then the verdict: final status, finish reason (normalized and raw) and the warnings.

The capture may also be an unbroken proxy's export of a journaled stream, fetched directly:
``unbroken inspect http://proxy:8000/v1/streams/ub_.../capture --token TOKEN`` (or ``-H
'Authorization: Bearer sk-...'``, the credential that created the stream).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .._receiver import DEFAULT_STALL_SECONDS
from ..client.capture import (
    LIVE,
    Capture,
    parse_capture,
    read_capture,
    redact_url,
    replay_capture,
)
from ..errors import PayloadError, StreamError
from ..message import Message
from ..resumption import STREAM_TOKEN_HEADER
from ..trace import TracedFrame
from .capture import parse_headers
from .errors import EXIT_INPUT, EXIT_NETWORK, EXIT_OK, CLIError
from .output import console

__all__ = ["add_parser", "add_source_arguments", "load_capture", "request_headers", "run"]

FETCH_TIMEOUT = 60.0  # seconds (connecting: 10)


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("inspect", help="show a capture frame by frame, with the verdict")
    add_source_arguments(parser)
    parser.add_argument("--dialect", help="override the capture's dialect")
    parser.add_argument("--limit", type=int, default=200, help="frames to show (default 200)")
    parser.add_argument("--stall", type=float, default=DEFAULT_STALL_SECONDS, metavar="SECONDS",
                        help="warn about frames further apart than this (default "
                             f"{DEFAULT_STALL_SECONDS:g})")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """The capture argument: a file, or the URL of a proxy's ``/v1/streams/{id}/capture``."""
    parser.add_argument("capture", help="a capture file (unbroken capture -o ...), or an unbroken "
                        "proxy's http(s)://.../v1/streams/ID/capture")
    parser.add_argument("--token", help="the stream token, to fetch a proxy's capture")
    parser.add_argument("-H", "--header", dest="headers", action="append", default=[],
                        metavar="'NAME: VALUE'",
                        help="a header to fetch a proxy's capture with (repeatable)")


def request_headers(arguments: argparse.Namespace) -> dict[str, str]:
    """The headers to fetch a capture URL with (``--token`` and ``-H``)."""
    headers = parse_headers(arguments.headers)
    if arguments.token:
        headers[STREAM_TOKEN_HEADER] = arguments.token
    return headers


def load_capture(path: str, headers: Mapping[str, str] | None = None) -> Capture:
    if path.startswith(("http://", "https://")):
        return fetch_capture(path, headers or {})
    if not Path(path).is_file():
        raise CLIError(f"cannot read capture {path}: no such file", EXIT_INPUT)
    try:
        return read_capture(path)
    except PayloadError as err:
        raise CLIError(f"unreadable capture: {err}", EXIT_INPUT) from err
    except (OSError, UnicodeDecodeError) as err:
        raise CLIError(f"cannot read capture {path}: {err}", EXIT_INPUT) from err


def fetch_capture(url: str, headers: Mapping[str, str]) -> Capture:
    """A capture served over HTTP (an unbroken proxy's export of a journaled stream)."""
    import httpx2  # only when a URL is given: the other commands start without it

    shown = redact_url(url)
    try:
        response = httpx2.get(url, headers=dict(headers),
                              timeout=httpx2.Timeout(FETCH_TIMEOUT, connect=10.0),
                              follow_redirects=False, trust_env=False)
    except httpx2.InvalidURL as err:
        raise CLIError(f"cannot fetch capture {shown}: bad URL ({err})", EXIT_INPUT) from err
    except httpx2.HTTPError as err:
        raise CLIError(f"cannot fetch capture {shown}: {type(err).__name__}: {err}",
                       EXIT_NETWORK) from err
    if response.status_code != 200:
        detail = "no such stream (unknown, expired, or not yours)" \
            if response.status_code == 404 else response.reason_phrase
        raise CLIError(f"cannot fetch capture {shown}: HTTP {response.status_code} {detail}",
                       EXIT_INPUT if response.status_code < 500 else EXIT_NETWORK)
    try:
        return parse_capture(response.text.splitlines(), shown)
    except PayloadError as err:
        raise CLIError(f"unreadable capture: {err}", EXIT_INPUT) from err


def replayed(capture: Capture, dialect: str | None,
             stall_seconds: float = DEFAULT_STALL_SECONDS) -> Message:
    try:
        return replay_capture(capture, dialect=dialect, stall_seconds=stall_seconds)
    except ValueError as err:  # an unknown dialect name
        raise CLIError(str(err), EXIT_INPUT) from err
    except StreamError as err:
        raise CLIError(f"cannot replay capture: {err}", EXIT_INPUT) from err


def _position(frame: TracedFrame) -> str:
    return f"seq {frame.seq}\n{frame.nbytes} B\nt={frame.t:.3f}s\n{frame.outcome}"


def _raw(frame: TracedFrame) -> str:
    if frame.raw is None:
        return "(raw bytes over the trace budget)"
    return frame.raw.decode("utf-8", "replace").rstrip("\r\n")


def verdict(message: Message) -> dict[str, Any]:
    return {
        "status": message.status.value,
        "finish_reason": message.finish_reason.value if message.finish_reason else None,
        "raw_finish_reason": message.raw_finish_reason,
        "text": message.text,
        "last_seq": message.last_seq,
        "error": None if message.error is None else f"{type(message.error).__name__}: "
        f"{message.error}",
        "warnings": [{"code": w.code, "detail": w.detail, "seq": w.seq}
                     for w in message.trace.warnings],
    }


def run(arguments: argparse.Namespace) -> int:
    capture = load_capture(arguments.capture, request_headers(arguments))
    message = replayed(capture, arguments.dialect, arguments.stall)
    frames = message.trace.frames
    if arguments.json:
        print(json.dumps({
            "capture": {"method": capture.method, "url": capture.url, "dialect": capture.dialect,
                        "connections": len(capture.connections), "end": capture.end,
                        "error": capture.error, "source": capture.source or None},
            "frames": [{"seq": f.seq, "block_id": f.block_id, "nbytes": f.nbytes, "t": f.t,
                        "outcome": f.outcome, "kinds": list(f.kinds), "delta": f.delta,
                        "raw": None if f.raw is None else f.raw.decode("utf-8", "replace")}
                       for f in frames],
            "verdict": verdict(message),
        }, ensure_ascii=False))
        return EXIT_OK
    out = console()
    where = f"{escape(capture.method)} {escape(capture.url)}"
    out.print(f"[bold]{where}[/]  dialect {capture.dialect}, "
              f"{len(capture.connections)} connection(s), body ended: {capture.end or 'cut off'}"
              + (f" ({escape(capture.error)})" if capture.error else ""))
    if capture.source:
        out.print(f"rebuilt from {escape(capture.source)}: one read per journaled frame at its "
                  "receive time; upstream id:/retry: lines and comments are not kept")
    if capture.end == LIVE:
        out.print("the stream was still going when this capture was taken")
    table = Table(show_lines=False, expand=True)
    table.add_column("raw lines", overflow="fold", ratio=5)
    table.add_column("parsed delta", overflow="fold", ratio=3)
    table.add_column("committed position", overflow="fold", ratio=2)
    for frame in frames[: arguments.limit]:
        style = "" if frame.outcome == "committed" else "yellow"
        table.add_row(Text(_raw(frame)), Text(frame.delta), Text(_position(frame)), style=style)
    out.print(table)
    if len(frames) > arguments.limit:
        out.print(f"… {len(frames) - arguments.limit} more frames (--limit)")
    v = verdict(message)
    colour = "green" if v["status"] == "completed" else "red"
    out.print(f"verdict: [bold {colour}]{v['status']}[/], finish reason {v['finish_reason']} "
              f"(raw {v['raw_finish_reason']!r}), last seq {v['last_seq']}, "
              f"{len(message.text)} characters of text")
    if v["error"]:
        out.print(f"error: {escape(v['error'])}")
    if not message.trace.warnings:
        out.print("warnings: none")
    for w in message.trace.warnings:
        out.print(f"warning [bold]{w.code}[/]: {escape(w.detail)}")
    return EXIT_OK
