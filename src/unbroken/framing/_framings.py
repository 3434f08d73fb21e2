"""``Framing``: how a body is cut into frames, as a value a dialect names (an open set).

Each framing knows its media types, makes its decoder, and says whether its frames carry ids of
their own (SSE ``id:`` lines) and which first byte of a body gives it away. The receiver, the
proxy and the client read these instead of asking which framing a dialect has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ._eventstream import EventStreamDecoder, EventStreamMessage
from ._ndjson import JSONLine, NDJSONDecoder
from ._sse import ServerSentEvent, SSEDecoder

__all__ = ["EVENT_STREAM", "FRAMINGS", "NDJSON", "SSE", "Decoder", "Framing", "WireFrame"]

WireFrame = ServerSentEvent | JSONLine | EventStreamMessage
"""One frame as a decoder returns it; each has ``nbytes`` and ``raw``."""


class Decoder(Protocol):
    """What every decoder has: bytes in, frames out, and where it stands."""

    @property
    def bytes_dispatched(self) -> int: ...

    @property
    def unterminated(self) -> bytes: ...

    def receive_data(self, data: bytes) -> Sequence[WireFrame]: ...

    def receive_eof(self) -> Sequence[WireFrame]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Framing:
    """``media_types``: the first is what a server sends; the rest are accepted too.
    ``sniff``: a body whose first non-whitespace byte is this one has this framing (``None``:
    the default, SSE). ``ids``: frames carry event ids on the wire. ``terminator``: what
    follows a frame's own bytes when it is written again (a framing without ids only).
    ``text``: frames are UTF-8 text (they may travel as SSE data); binary ones may not."""

    name: str
    media_types: tuple[str, ...]
    decoder: Callable[[int, str], Decoder]  # (max_event_size, last_event_id)
    ids: bool = False
    sniff: int | None = None
    terminator: bytes = b""
    text: bool = True

    def new_decoder(self, max_event_size: int, last_event_id: str = "") -> Decoder:
        return self.decoder(max_event_size, last_event_id)

    def accepts(self, content_type: str) -> bool:
        """True if a response with this ``Content-Type`` is a body of this framing."""
        return content_type.partition(";")[0].strip().lower() in self.media_types


SSE = Framing(
    name="sse",
    media_types=("text/event-stream",),
    decoder=lambda size, last_id: SSEDecoder(max_event_size=size, last_event_id=last_id),
    ids=True,
)
NDJSON = Framing(
    name="ndjson",
    media_types=("application/x-ndjson", "application/json"),
    decoder=lambda size, last_id: NDJSONDecoder(max_event_size=size),
    sniff=0x7B,  # "{"
    terminator=b"\n",
)
EVENT_STREAM = Framing(
    name="eventstream",
    media_types=("application/vnd.amazon.eventstream",),
    decoder=lambda size, last_id: EventStreamDecoder(max_event_size=size),
    # A prelude's first byte is the high byte of the total length: 0 below 16 MiB.
    sniff=0x00,
    text=False,
)

FRAMINGS: tuple[Framing, ...] = (SSE, NDJSON, EVENT_STREAM)
