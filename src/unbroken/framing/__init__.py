"""Bytes to frames: SSE events, NDJSON lines and whole UTF-8 characters (sans-I/O)."""

from .ndjson import JSONLine, NDJSONDecoder
from .sse import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent, SSEDecoder
from .utf8 import Utf8Decoder

__all__ = [
    "DEFAULT_MAX_EVENT_SIZE",
    "JSONLine",
    "NDJSONDecoder",
    "SSEDecoder",
    "ServerSentEvent",
    "Utf8Decoder",
]
