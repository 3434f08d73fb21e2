"""Captures: every network read of a stream, with its time, as JSON Lines.

Format::

    {"unbroken_capture": 1, "method": ..., "url": ..., "dialect": ..., "started": <unix time>}
    {"connection": n, "kind": "first"|"retry"|"resume", "status": ..., "headers": {...}}
    {"t": <seconds since start>, "b": "<base64 bytes>"}          one per network read
    {"end": "eof"|"error"|"live", "error": "..."}

``"live"`` ends a capture taken while the stream was still going (an unbroken proxy's export of
a journaled stream, ``GET /v1/streams/{id}/capture``): its replay leaves the message
``streaming`` instead of closing it. Such an export's header also says where it came from
(``"source": "unbroken-proxy-journal"``); readers ignore fields they do not know.

Credentials never reach the file: credential headers are replaced by ``[redacted]`` and a ``key=``
query parameter in a URL is masked. Replaying a capture feeds the same bytes, connection by
connection, through the same receiver, so it gives the identical ``Message`` under any read
boundaries.
"""

from __future__ import annotations

import base64
import json
import re
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from .._receiver import DEFAULT_STALL_SECONDS, StreamReceiver
from ..errors import PayloadError, StreamError
from ..message import Message
from ..resumption import STREAM_TOKEN_HEADER

__all__ = [
    "CANCELLED",
    "CREDENTIAL_HEADERS",
    "LIVE",
    "Capture",
    "CaptureConnection",
    "CaptureWriter",
    "parse_capture",
    "read_capture",
    "redact_headers",
    "redact_url",
    "replay_capture",
]

CREDENTIAL_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        STREAM_TOKEN_HEADER.lower(),
    }
)
_KEY_PARAM = re.compile(r"(?i)([?&](?:key|api_key|token)=)[^&#]*")
REDACTED = "[redacted]"
# The end record's error when the caller stopped reading: a replay ends the message cancelled.
CANCELLED = "cancelled by the caller"
# The end record of a capture taken while the stream was still going.
LIVE = "live"
ConnectionKind = Literal["first", "retry", "resume"]


def redact_url(url: str) -> str:
    return _KEY_PARAM.sub(lambda m: m.group(1) + REDACTED, url)


def redact_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        out[key] = REDACTED if key in CREDENTIAL_HEADERS else value
    return out


class CaptureWriter:
    """Appends capture records as they happen, flushed per record so a crash keeps them."""

    def __init__(self, path: str | Path, *, method: str, url: str, dialect: str, started: float):
        self._file: IO[str] = open(path, "w", encoding="utf-8")
        self._write(
            {
                "unbroken_capture": 1,
                "method": method,
                "url": redact_url(url),
                "dialect": dialect,
                "started": started,
            }
        )
        self._connections = 0

    def connection(
        self, kind: ConnectionKind, status: int, headers: Iterable[tuple[str, str]]
    ) -> None:
        self._connections += 1
        self._write(
            {
                "connection": self._connections,
                "kind": kind,
                "status": status,
                "headers": redact_headers(headers),
            }
        )

    def read(self, t: float, data: bytes) -> None:
        self._write({"t": round(t, 6), "b": base64.b64encode(data).decode("ascii")})

    def end(self, error: str | None = None) -> None:
        self._write({"end": "error", "error": error} if error else {"end": "eof"})
        self.close()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def _write(self, record: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()


@dataclass(slots=True, kw_only=True)
class CaptureConnection:
    number: int
    kind: ConnectionKind
    status: int
    headers: dict[str, str]
    reads: list[tuple[float, bytes]] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class Capture:
    method: str
    url: str
    dialect: str
    started: float
    connections: list[CaptureConnection]
    end: str | None  # "eof", "error", "live", or None when the capture was cut off
    error: str | None
    source: str = ""  # who wrote it, when not a client: "unbroken-proxy-journal"

    @property
    def body(self) -> bytes:
        """Every byte of the successful connections, in order."""
        return b"".join(b for c in self.connections for _, b in c.reads)


def read_capture(path: str | Path) -> Capture:
    """Load a capture file; a malformed one raises ``PayloadError`` naming the line."""
    with open(path, encoding="utf-8") as file:
        return parse_capture(file, str(path))


def parse_capture(lines: Iterable[str], name: str) -> Capture:
    """A capture from its lines (a file's, or a body fetched from an unbroken proxy); ``name``
    says where they came from in errors. A malformed one raises ``PayloadError``."""
    header: dict[str, Any] | None = None
    connections: list[CaptureConnection] = []
    end: str | None = None
    error: str | None = None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if header is None:
                if not isinstance(record, dict) or record.get("unbroken_capture") != 1:
                    raise ValueError("not an unbroken capture (no unbroken_capture: 1 header)")
                header = record
            elif "t" in record:
                if not connections:
                    raise ValueError("a read before any connection record")
                connections[-1].reads.append(
                    (float(record["t"]), base64.b64decode(record["b"], validate=True))
                )
            elif "connection" in record:
                connections.append(
                    CaptureConnection(
                        number=int(record["connection"]),
                        kind=record.get("kind", "first"),
                        status=int(record["status"]),
                        headers=dict(record.get("headers", {})),
                    )
                )
            elif "end" in record:
                end, error = record["end"], record.get("error")
            else:
                raise ValueError(f"unknown record {sorted(record)}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PayloadError(f"{name}: line {lineno}: {exc}", line=lineno) from exc
    if header is None:
        raise PayloadError(f"{name}: empty file, not an unbroken capture", line=1)
    return Capture(
        method=str(header.get("method", "")),
        url=str(header.get("url", "")),
        dialect=str(header.get("dialect", "auto")),
        started=float(header.get("started", 0.0)),
        connections=connections,
        end=end,
        error=error,
        source=str(header.get("source", "")),
    )


def replay_capture(
    capture: Capture,
    *,
    split: Iterable[int] | None = None,
    trace: bool = True,
    dialect: str | None = None,
    stall_seconds: float = DEFAULT_STALL_SECONDS,
) -> Message:
    """Feed a capture back through a receiver and return the closed ``Message``.

    ``split`` re-cuts each connection's bytes at other boundaries (a sequence of read sizes,
    cycled); by default the original reads are used. A connection of kind ``retry`` starts a new
    message, as the client did; ``resume`` continues the same one on a new connection. Frames
    further apart than ``stall_seconds`` leave a ``stall`` warning.
    """
    sizes = list(split) if split is not None else None
    cancelled = capture.end == "error" and capture.error == CANCELLED
    # Neither a caller who stopped reading nor a capture of a live stream saw the body's end.
    unended = cancelled or capture.end == LIVE
    answered = [conn for conn in capture.connections if 200 <= conn.status < 300]
    receiver: StreamReceiver | None = None
    for index, conn in enumerate(answered):
        if receiver is None or conn.kind != "resume":
            receiver = StreamReceiver(dialect or capture.dialect, trace=trace,
                                      stall_seconds=stall_seconds)
        else:
            receiver = receiver.reconnect()
        for t, data in _recut(conn.reads, sizes):
            if receiver.finished:  # the client stopped reading at a protocol error too
                break
            receiver.receive_data(data, t)
        if not receiver.finished and not (unended and index == len(answered) - 1):
            receiver.receive_eof(conn.reads[-1][0] if conn.reads else 0.0)
    if receiver is None:
        receiver = StreamReceiver(dialect or capture.dialect, trace=trace,
                                  stall_seconds=stall_seconds)
    if cancelled:
        receiver.close(cancelled=True)
        return receiver.message
    if capture.end == LIVE:
        return receiver.message  # still streaming when the capture was taken
    message = receiver.message
    if capture.end == "error" and capture.error:
        error = StreamError(capture.error)
        if not message.closed:
            receiver.close(error)
        elif message.error is None and message.finish is None:
            # As the client did: the body's end closed the message, the error says what cut it.
            message.error = error
            message.warn("error", f"{type(error).__name__}: {error}")
    else:
        receiver.close()
    return message


def _recut(
    reads: list[tuple[float, bytes]], sizes: list[int] | None
) -> Iterable[tuple[float, bytes]]:
    """The same bytes in pieces of ``sizes``; each piece keeps the time of the original read
    that held its last byte, so frame times (and stall warnings) do not change."""
    if not sizes:
        yield from reads
        return
    ends: list[int] = []
    total = 0
    for _, data in reads:
        total += len(data)
        ends.append(total)
    body = b"".join(data for _, data in reads)
    pos = i = 0
    while pos < len(body):
        piece = body[pos : pos + max(1, sizes[i % len(sizes)])]
        pos += len(piece)
        i += 1
        yield reads[bisect_left(ends, pos)][0], piece
