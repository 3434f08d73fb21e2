"""unbroken: receive LLM streaming output correctly.

Bytes become frames (``SSEDecoder``, ``NDJSONDecoder``, ``Utf8Decoder``), frames become normalized
events (one dialect per provider), and events are committed to a ``Message`` whose end state always
explains itself. Everything imported here is sans-I/O and needs only the standard library.
"""

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

__all__ = [
    "ConnectTimeout",
    "ContentTypeError",
    "DecodingError",
    "ErrorEvent",
    "Event",
    "EventTooLargeError",
    "Finish",
    "FinishReason",
    "FirstEventTimeout",
    "IdleTimeout",
    "Interrupted",
    "JSONLine",
    "LocalProtocolError",
    "MessageStart",
    "NDJSONDecoder",
    "PayloadError",
    "Ping",
    "ProtocolError",
    "ProviderError",
    "ReasoningDelta",
    "SSEDecoder",
    "SequenceError",
    "ServerSentEvent",
    "Status",
    "StreamEnd",
    "StreamError",
    "StreamTimeout",
    "TextDelta",
    "ToolCallDelta",
    "TotalTimeout",
    "TransportError",
    "TruncatedError",
    "UnknownEvent",
    "UpstreamStatusError",
    "Usage",
    "Utf8Decoder",
    "__version__",
]
