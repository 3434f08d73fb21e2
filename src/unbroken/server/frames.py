"""What a source's values become: journaled frames, and the SSE bytes a browser reads.

==============================  ===================  ==============================================
a source yields                 ``event:``           ``data:``
==============================  ===================  ==============================================
``str``                         ``text``             the text as a JSON string (exact: any
                                                     character, CR and LF included)
``dict``                        (none: ``message``)  the dict as JSON
``ServerSentEvent``             its own              its own, verbatim
``TextDelta``                   ``text``             as ``str``
another normalized event        its kind (below)     its fields but ``seq``, as JSON
==============================  ===================  ==============================================

The last journaled frame of every stream is ``event: end`` (``streams/app_stream.py``); no
value may take that name. Anything else a source yields (bytes, numbers, objects) fails the
stream with ``UnsupportedValueError`` naming the type.

On the wire each frame carries ``id: <stream_id>:<seq>``; a keep-alive is a comment line.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Final

from ..errors import FrameLimitError, UnsupportedValueError
from ..events import (
    ErrorEvent,
    Finish,
    MessageStart,
    Ping,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    UnknownEvent,
    Usage,
)
from ..framing import ServerSentEvent
from ..streams.app_stream import END_EVENT
from ..streams.journal import FrameRecord

__all__ = ["KEEPALIVE", "TEXT_EVENT", "encode_value", "sse_bytes"]

TEXT_EVENT: Final = "text"
KEEPALIVE: Final = b": keep-alive\n\n"
# The normalized events' names on the wire (TextDelta is "text", like a str).
_KINDS: Final[dict[type, str]] = {
    ReasoningDelta: "reasoning",
    ToolCallDelta: "tool_call",
    Usage: "usage",
    MessageStart: "message_start",
    Finish: "finish",
    ErrorEvent: "error",
    StreamEnd: "stream_end",
    Ping: "ping",
    UnknownEvent: "unknown",
}


def _json(value: Any) -> bytes:
    # default=str: an UnknownEvent's raw value or a dict from an app may hold a datetime or a
    # Decimal; it is sent as its text rather than failing the stream.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def encode_value(value: object, seq: int, at: float, max_bytes: int) -> FrameRecord:
    """The frame of one value a source yielded; ``UnsupportedValueError`` for a type it cannot
    send, ``FrameLimitError`` for data over ``max_bytes``."""
    cls = value.__class__
    event: str | None
    text = ""
    if cls is str or cls is TextDelta:
        text = value if cls is str else value.text  # type: ignore[assignment, attr-defined]
        event, data = TEXT_EVENT, _json(text)
    elif isinstance(value, dict):
        event, data = None, _json(value)
    elif isinstance(value, ServerSentEvent):
        if value.event == END_EVENT or "\n" in value.event or "\r" in value.event:
            raise UnsupportedValueError(
                f"unbroken.server: an SSE event may not be named {value.event!r} (a line "
                f"break, or {END_EVENT!r}: that name is the stream's end)",
                type_name="ServerSentEvent")
        if "\r" in value.data:
            raise UnsupportedValueError(
                "unbroken.server: an SSE event's data may not hold a CR (SSE reads it as a "
                "line break); send a str or a dict instead", type_name="ServerSentEvent")
        event = None if value.event == "message" else value.event
        data = value.data.encode()
    elif cls in _KINDS:
        fields = {field.name: getattr(value, field.name)
                  for field in dataclasses.fields(value)  # type: ignore[arg-type]
                  if field.name != "seq"}
        event, data = _KINDS[cls], _json(fields)
    else:
        name = f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" \
            else cls.__qualname__
        raise UnsupportedValueError(
            f"unbroken.server: a source may yield str, dict, ServerSentEvent or unbroken's "
            f"events, not {name}", type_name=name)
    if len(data) > max_bytes:
        raise FrameLimitError(
            f"unbroken.server: a frame of {len(data)} bytes is over max_frame_bytes "
            f"({max_bytes})", limit=max_bytes)
    return FrameRecord(seq, event, data, text, at)


def sse_bytes(stream_id: str, frames: list[FrameRecord], retry_ms: int | None) -> bytes:
    """Frames as SSE with ids; ``retry_ms`` (the first frames of a response) adds the hint.
    Data is split on LF into ``data:`` lines; a browser joins them back with LF. (A ``str`` is
    JSON, so its CRs travel escaped; an SSE event value's data with a CR is refused.)"""
    out: list[bytes] = []
    if retry_ms is not None:
        out.append(b"retry: %d\n" % retry_ms)
    ident = stream_id.encode()
    for frame in frames:
        if frame.event is not None:
            out.append(b"event: " + frame.event.encode() + b"\n")
        out.append(b"id: " + ident + b":%d\n" % frame.seq)
        out.append(b"data: " + frame.data.replace(b"\n", b"\ndata: ") + b"\n\n")
    return b"".join(out)
