"""Every error unbroken raises or records, in one place.

The hierarchy::

    StreamError                      root; what ``Message.error`` holds
    ├── ProtocolError                found in the bytes of the stream itself
    │   ├── DecodingError            invalid UTF-8 (``offset``: byte offset in the stream)
    │   ├── EventTooLargeError       a line or event over ``max_event_size`` (``limit``, ``offset``)
    │   ├── PayloadError             malformed JSON or an unusable payload (``line``, ``offset``)
    │   ├── TruncatedError           the body ended inside a character, line or frame (``tail``)
    │   └── SequenceError            an event not allowed in the current state (``state``, ``seq``)
    ├── ProviderError                the upstream reported an error in the stream (``event``)
    ├── UpstreamStatusError          I/O: a final non-2xx answer (``status``, ``body``)
    ├── ContentTypeError             I/O: the body is not the dialect's media type
    ├── StreamTimeout                I/O: a deadline passed (``seconds``)
    │   ├── ConnectTimeout
    │   ├── FirstEventTimeout
    │   ├── IdleTimeout              no content for ``idle_timeout`` (pings do not count)
    │   └── TotalTimeout
    ├── TransportError               I/O: the connection broke (chained from the HTTP library)
    ├── ProxyInterrupted             an unbroken proxy's own frame: its stream ended interrupted
    └── Interrupted                  retries or resume exhausted; carries the partial ``message``
    LocalProtocolError               misuse of an object (data after EOF, reuse after an error)
    ├── UnsupportedValueError        unbroken.server: a source yielded a value of a type it cannot
    │                                send (``type_name``)
    └── FrameLimitError              unbroken.server: a source yielded a frame over the size limit
                                     or more frames than a stream may hold (``limit``)
    StreamNotFoundError              unbroken.server: no such stream for this owner or token
                                     (unknown, expired, or not theirs); a ``LookupError``
    StreamRefusedError               unbroken.server: a start refused (``status``: 429 the owner's
                                     live streams, 503 the process's, or not open)

When a deadline, a final HTTP status, a wrong content type or a proxy's own frame ends a stream
short of its finish, the client raises an exception of two types, ``Interrupted`` and the
cause's own (e.g. ``Interrupted[IdleTimeout]``, from ``interrupted_by``): code that catches
``Interrupted`` for every interrupted stream and code that catches ``IdleTimeout`` both see it.

``LocalProtocolError`` is deliberately *not* a ``StreamError``: it reports a bug in the caller,
never something about the stream, so it never lands in ``Message.error``.

These classes subclass nothing from an HTTP library, so the sans-I/O core can raise them and a
caller can catch them without importing one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .events import ErrorEvent

__all__ = [
    "ConnectTimeout",
    "ContentTypeError",
    "DecodingError",
    "EventTooLargeError",
    "FirstEventTimeout",
    "FrameLimitError",
    "IdleTimeout",
    "Interrupted",
    "LocalProtocolError",
    "PayloadError",
    "ProtocolError",
    "ProviderError",
    "ProxyInterrupted",
    "SequenceError",
    "StreamError",
    "StreamNotFoundError",
    "StreamRefusedError",
    "StreamTimeout",
    "TotalTimeout",
    "TransportError",
    "TruncatedError",
    "UnsupportedValueError",
    "UpstreamStatusError",
]


class StreamError(Exception):
    """Root of every error about a stream.

    ``events`` holds what a decoder completed in the same call before it raised, so that nothing
    already received is lost; ``message`` holds the partial ``Message`` where one exists.
    """

    def __init__(self, detail: str, *, events: list[Any] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.events: list[Any] = events if events is not None else []
        self.message: Any = None

    def __str__(self) -> str:
        return self.detail


class ProtocolError(StreamError):
    """The bytes of the stream break its protocol."""


class DecodingError(ProtocolError):
    """Invalid UTF-8; ``offset`` is the absolute byte offset of the first bad byte."""

    def __init__(self, detail: str, *, offset: int, events: list[Any] | None = None) -> None:
        super().__init__(detail, events=events)
        self.offset = offset


class EventTooLargeError(ProtocolError):
    """A line or event grew past ``limit`` bytes; raised before that memory is spent."""

    def __init__(
        self, detail: str, *, limit: int, offset: int, events: list[Any] | None = None
    ) -> None:
        super().__init__(detail, events=events)
        self.limit = limit
        self.offset = offset


class PayloadError(ProtocolError):
    """A frame's payload cannot be used: malformed JSON, or a body in the wrong shape.

    ``line`` is the 1-based line (NDJSON) or frame number; ``offset`` the byte offset where the
    frame starts in the stream. For a frame whose payload a dialect refused, every byte of the
    earlier reads is counted, but a block without an event (a keep-alive comment, the BOM)
    that came in the same read before the frame is not: the offset is short by its bytes.
    """

    def __init__(
        self,
        detail: str,
        *,
        line: int | None = None,
        offset: int | None = None,
        events: list[Any] | None = None,
    ) -> None:
        super().__init__(detail, events=events)
        self.line = line
        self.offset = offset


class TruncatedError(ProtocolError):
    """The body ended inside a character, line or frame; ``tail`` holds the leftover bytes."""

    def __init__(self, detail: str, *, tail: bytes = b"", events: list[Any] | None = None) -> None:
        super().__init__(detail, events=events)
        self.tail = tail


class SequenceError(ProtocolError):
    """An event arrived that the message's current state does not allow."""

    def __init__(self, detail: str, *, state: str, kind: str, seq: int) -> None:
        super().__init__(detail)
        self.state = state
        self.kind = kind
        self.seq = seq


class ProviderError(StreamError):
    """The upstream reported an error inside the stream; ``event`` is its ``ErrorEvent``."""

    def __init__(self, event: ErrorEvent) -> None:
        super().__init__(f"{event.type}: {event.message}")
        self.event = event

    @property
    def retryable(self) -> bool:
        return self.event.retryable


class UpstreamStatusError(StreamError):
    """The upstream answered with a final non-2xx status; ``body`` is an excerpt."""

    def __init__(self, status: int, body: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(f"upstream answered HTTP {status}: {body[:200]}".rstrip(": "))
        self.status = status
        self.body = body
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.status == 429 or self.status >= 500


class ContentTypeError(StreamError):
    """The response body is not the media type the dialect streams."""

    def __init__(self, content_type: str, expected: str) -> None:
        super().__init__(f"expected {expected}, got content-type {content_type!r}")
        self.content_type = content_type
        self.expected = expected


class StreamTimeout(StreamError):
    """A deadline passed; ``seconds`` is the deadline that was exceeded."""

    def __init__(self, detail: str, *, seconds: float) -> None:
        super().__init__(detail)
        self.seconds = seconds


class ConnectTimeout(StreamTimeout):
    """No connection (or no response head) within ``connect_timeout``."""


class FirstEventTimeout(StreamTimeout):
    """No content event within ``first_event_timeout`` of the response head."""


class IdleTimeout(StreamTimeout):
    """No content for ``idle_timeout`` seconds; pings and comments do not reset it."""


class TotalTimeout(StreamTimeout):
    """The whole stream took longer than ``total_timeout``."""


class TransportError(StreamError):
    """The connection broke; the HTTP library's exception is ``__cause__``."""


class ProxyInterrupted(StreamError):
    """An unbroken proxy ended the stream ``interrupted`` and said so in a frame of its own (its
    upstream broke, it shut down or lost its producer): not the provider's error. ``code`` is
    the proxy's reason (``upstream_interrupted`` ...), ``status`` the stream's status in the
    proxy's journal; the frame's bytes are in the trace."""

    def __init__(self, detail: str, *, code: str, status: str) -> None:
        super().__init__(detail)
        self.code = code
        self.status = status


class Interrupted(StreamError):
    """The stream ended without a finish reason and could not be continued.

    ``message`` is the partial ``Message`` (status ``interrupted``), text kept.
    """

    def __init__(self, detail: str, *, message: Any = None) -> None:
        super().__init__(detail)
        self.message = message


class LocalProtocolError(Exception):
    """The caller misused an object: data after EOF, or input after a raised error."""


class UnsupportedValueError(LocalProtocolError):
    """A source of ``unbroken.server`` yielded a value of a type it cannot send."""

    def __init__(self, detail: str, *, type_name: str) -> None:
        super().__init__(detail)
        self.type_name = type_name


class FrameLimitError(LocalProtocolError):
    """A source of ``unbroken.server`` yielded a frame over ``limit`` bytes, or more than
    ``limit`` frames."""

    def __init__(self, detail: str, *, limit: int) -> None:
        super().__init__(detail)
        self.limit = limit


class StreamNotFoundError(LookupError):
    """``unbroken.server``: no such stream for this owner or token (unknown, expired, or not
    theirs: the three are not told apart, so a stream id reveals nothing)."""


class StreamRefusedError(Exception):
    """``unbroken.server`` refused to start a stream; ``status`` is the HTTP status that says
    why (429: the owner has too many live streams; 503: the process has, or is not open)."""

    def __init__(self, detail: str, *, status: int) -> None:
        super().__init__(detail)
        self.status = status


class _InterruptedBy(Interrupted):
    """An ``Interrupted`` that is also of its cause's type, with the cause's attributes."""

    def __init__(self, detail: str, *, message: Any = None, **attributes: Any) -> None:
        StreamError.__init__(self, detail)
        vars(self).update(attributes)
        self.message = message


# One class per cause a caller may want to catch by its own type when it ends a stream.
class InterruptedByConnectTimeout(_InterruptedBy, ConnectTimeout): ...
class InterruptedByFirstEventTimeout(_InterruptedBy, FirstEventTimeout): ...
class InterruptedByIdleTimeout(_InterruptedBy, IdleTimeout): ...
class InterruptedByTotalTimeout(_InterruptedBy, TotalTimeout): ...
class InterruptedByStreamTimeout(_InterruptedBy, StreamTimeout): ...
class InterruptedByUpstreamStatusError(_InterruptedBy, UpstreamStatusError): ...
class InterruptedByContentTypeError(_InterruptedBy, ContentTypeError): ...
class InterruptedByProxyInterrupted(_InterruptedBy, ProxyInterrupted): ...


_BY_CAUSE: dict[type[StreamError], type[_InterruptedBy]] = {
    kind.__bases__[1]: kind
    for kind in (
        InterruptedByConnectTimeout,
        InterruptedByFirstEventTimeout,
        InterruptedByIdleTimeout,
        InterruptedByTotalTimeout,
        InterruptedByStreamTimeout,
        InterruptedByUpstreamStatusError,
        InterruptedByContentTypeError,
        InterruptedByProxyInterrupted,
    )
}
for _cause, _kind in _BY_CAUSE.items():
    _kind.__name__ = f"Interrupted[{_cause.__name__}]"  # how it reads; pickled by __qualname__
    _kind.__doc__ = f"An interrupted stream that {_cause.__name__} ended."


def interrupted_by(cause: StreamError | None, detail: str, *, message: Any) -> Interrupted:
    """The ``Interrupted`` to raise for a stream that ``cause`` ended without a finish reason.

    For a deadline, a final HTTP status, a wrong content type or a proxy's own frame it is also
    an instance of the cause's type (``Interrupted[IdleTimeout]`` say), with the cause's
    attributes (``seconds``, ``status``, ``code`` ...), so ``except IdleTimeout`` catches it too.
    """
    kind = next((_BY_CAUSE[base] for base in type(cause).__mro__ if base in _BY_CAUSE), None)
    if kind is None:
        return Interrupted(detail, message=message)
    attributes = {key: value for key, value in vars(cause).items()
                  if key not in ("detail", "message")}
    return kind(detail, message=message, **attributes)
