"""unbroken: receive LLM streaming output correctly.

Bytes become frames (``SSEDecoder``, ``NDJSONDecoder``, ``Utf8Decoder``), frames become normalized
events (one dialect per provider), and events are committed to a ``Message`` whose end state always
explains itself. Everything imported here is sans-I/O and needs only the standard library.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._receiver import Frame, StreamReceiver, parse
from ._version import __version__
from .errors import (
    ConnectTimeout,
    ContentTypeError,
    DecodingError,
    EventTooLargeError,
    FirstEventTimeout,
    IdleTimeout,
    Interrupted,
    LocalProtocolError,
    PayloadError,
    ProtocolError,
    ProviderError,
    ProxyInterrupted,
    SequenceError,
    StreamError,
    StreamTimeout,
    TotalTimeout,
    TransportError,
    TruncatedError,
    UpstreamStatusError,
)
from .events import (
    ErrorEvent,
    Event,
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
from .finish import FinishReason, Status
from .framing import JSONLine, NDJSONDecoder, ServerSentEvent, SSEDecoder, Utf8Decoder
from .message import Message, ToolCall
from .trace import Trace

# The I/O layers need httpx2 (extra ``client``), GraphemeBuffer needs regex; they load on first
# use so that importing ``unbroken`` stays standard-library only. Type checkers see the real names.
if _TYPE_CHECKING:
    from .client import AsyncStream, Deadlines, Retry, Stream, astream, stream
    from .client.graphemes import GraphemeBuffer
    from .client.resuming import ResumingTransport, async_http_client, http_client
    from .sdk import from_anthropic, from_bedrock, from_gemini, from_ollama, from_openai

_LAZY = {
    "AsyncStream": "unbroken.client",
    "Deadlines": "unbroken.client",
    "GraphemeBuffer": "unbroken.client.graphemes",
    "ResumingTransport": "unbroken.client.resuming",
    "Retry": "unbroken.client",
    "Stream": "unbroken.client",
    "astream": "unbroken.client",
    "async_http_client": "unbroken.client.resuming",
    "from_anthropic": "unbroken.sdk",
    "from_bedrock": "unbroken.sdk",
    "from_gemini": "unbroken.sdk",
    "from_ollama": "unbroken.sdk",
    "from_openai": "unbroken.sdk",
    "http_client": "unbroken.client.resuming",
    "stream": "unbroken.client",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'unbroken' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AsyncStream",
    "ConnectTimeout",
    "ContentTypeError",
    "Deadlines",
    "DecodingError",
    "ErrorEvent",
    "Event",
    "EventTooLargeError",
    "Finish",
    "FinishReason",
    "FirstEventTimeout",
    "Frame",
    "GraphemeBuffer",
    "IdleTimeout",
    "Interrupted",
    "JSONLine",
    "LocalProtocolError",
    "Message",
    "MessageStart",
    "NDJSONDecoder",
    "PayloadError",
    "Ping",
    "ProtocolError",
    "ProviderError",
    "ProxyInterrupted",
    "ReasoningDelta",
    "ResumingTransport",
    "Retry",
    "SSEDecoder",
    "SequenceError",
    "ServerSentEvent",
    "Status",
    "Stream",
    "StreamEnd",
    "StreamError",
    "StreamReceiver",
    "StreamTimeout",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "TotalTimeout",
    "Trace",
    "TransportError",
    "TruncatedError",
    "UnknownEvent",
    "UpstreamStatusError",
    "Usage",
    "Utf8Decoder",
    "__version__",
    "astream",
    "async_http_client",
    "from_anthropic",
    "from_bedrock",
    "from_gemini",
    "from_ollama",
    "from_openai",
    "http_client",
    "parse",
    "stream",
]
