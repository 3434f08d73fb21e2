"""Bytes to frames: SSE events, NDJSON lines, AWS event-stream messages and whole UTF-8
characters (sans-I/O)."""

from ._eventstream import EventStreamDecoder, EventStreamMessage, encode_message
from ._framings import EVENT_STREAM, FRAMINGS, NDJSON, SSE, Decoder, Framing, WireFrame
from ._ndjson import JSONLine, NDJSONDecoder
from ._sse import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent, SSEDecoder
from ._utf8 import Utf8Decoder

__all__ = [
    "DEFAULT_MAX_EVENT_SIZE",
    "EVENT_STREAM",
    "FRAMINGS",
    "NDJSON",
    "SSE",
    "Decoder",
    "EventStreamDecoder",
    "EventStreamMessage",
    "Framing",
    "JSONLine",
    "NDJSONDecoder",
    "SSEDecoder",
    "ServerSentEvent",
    "Utf8Decoder",
    "WireFrame",
    "encode_message",
]
