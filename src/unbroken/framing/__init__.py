"""Bytes to frames: SSE events, NDJSON lines, AWS event-stream messages and whole UTF-8
characters (sans-I/O)."""

from .eventstream import EventStreamDecoder, EventStreamMessage, encode_message
from .framings import EVENT_STREAM, FRAMINGS, NDJSON, SSE, Decoder, Framing, WireFrame
from .ndjson import JSONLine, NDJSONDecoder
from .sse import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent, SSEDecoder
from .utf8 import Utf8Decoder

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
