"""What every provider format module shares: the plan of a reply, frames, and their encoding.

A provider module turns a ``Plan`` into a list of ``PlannedFrame`` values (one SSE event, one NDJSON
line or one AWS event-stream message each) and into the whole non-streaming body. ``encode``
writes a frame as wire bytes. The mock writes these bytes itself; it never uses the library's
own parsers or dialects.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "CREATED",
    "Dialect",
    "Framing",
    "Plan",
    "PlannedFrame",
    "compact_json",
    "encode",
    "go_json",
    "spaced_json",
]

# A fixed creation time, so that the same request always streams the same bytes.
CREATED = 1_735_689_600


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What one generation says; everything in the stream follows from it."""

    model: str
    ident: str
    deltas: tuple[str, ...]
    finish: str
    include_usage: bool = False
    background: bool = False
    partial_args: bool = False  # stream the tool call's arguments by JSON path (Vertex)

    @property
    def text(self) -> str:
        return "".join(self.deltas)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedFrame:
    """One SSE event (``event`` may be None), one NDJSON line or one event-stream message
    (``event`` is its event type, or its exception type when ``exception``); ``data`` is the
    payload."""

    data: bytes
    event: str | None = None
    sequence_number: int | None = None
    exception: bool = False


class Framing(Enum):
    SSE = "sse"
    SSE_CRLF = "sse-crlf"
    NDJSON = "ndjson"
    EVENT_STREAM = "eventstream"


def encode(frame: PlannedFrame, framing: Framing, frame_id: int | None = None) -> bytes:
    """The frame's bytes on the wire, with an ``id:`` line first when ``frame_id`` is given."""
    if framing is Framing.NDJSON:
        return frame.data + b"\n"
    if framing is Framing.EVENT_STREAM:
        return event_stream_message(frame)
    eol = b"\r\n" if framing is Framing.SSE_CRLF else b"\n"
    lines = []
    if frame_id is not None:
        lines.append(b"id: %d" % frame_id)
    if frame.event is not None:
        lines.append(b"event: " + frame.event.encode())
    lines.append(b"data: " + frame.data)
    return eol.join(lines) + eol + eol


def event_stream_message(frame: PlannedFrame) -> bytes:
    """An AWS event-stream message: prelude (total and headers length, their CRC32), string
    headers as AWS services send them, the payload, and the CRC32 of all that."""
    kind = ("exception", ":exception-type") if frame.exception else ("event", ":event-type")
    headers = b"".join(
        _string_header(name, value)
        for name, value in ((kind[1], frame.event or ""), (":content-type", "application/json"),
                            (":message-type", kind[0]))
    )
    total = 16 + len(headers) + len(frame.data)
    prelude = total.to_bytes(4, "big") + len(headers).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + headers + frame.data
    return message + zlib.crc32(message).to_bytes(4, "big")


def _string_header(name: str, value: str) -> bytes:
    encoded = value.encode()
    return bytes([len(name)]) + name.encode() + b"\x07" + len(encoded).to_bytes(2, "big") + encoded


def compact_json(value: Any) -> bytes:
    """JSON as OpenAI and Anthropic send it: no spaces, UTF-8 kept raw."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def spaced_json(value: Any) -> bytes:
    """JSON as Gemini sends it: a space after each colon, none after commas."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ": ")).encode()


_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
               "\u2029": "\\u2029"}


def go_json(value: Any) -> bytes:
    """JSON as Go's encoding/json writes it (Ollama): compact, HTML characters escaped."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    # These characters only occur inside JSON strings, so a plain replace is exact.
    for char, escape in _GO_ESCAPES.items():
        text = text.replace(char, escape)
    return text.encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """One provider format: how it frames, streams, answers whole, and reports errors."""

    name: str
    framing: Framing
    media_type: str
    keepalive: bytes
    dumps: Callable[[Any], bytes]
    finishes: frozenset[str]
    stream_frames: Callable[[Plan], list[PlannedFrame]]
    whole_body: Callable[[Plan], tuple[int, dict[str, Any]]]
    error_frame: Callable[[int], PlannedFrame]
    error_body: Callable[[int, str], dict[str, Any]]
    numbered: bool = False  # frames carry the provider's sequence numbers
    partial_args: bool = False  # can stream a call's arguments by JSON path (``partial_args``)
    background: bool = False  # a request's ``background: true`` stores the response (Responses)
    # The whole body of a stream request that did not ask for SSE (Gemini without ?alt=sse).
    array_body: Callable[[Plan], bytes] | None = None
