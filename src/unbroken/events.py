"""Normalized events: what every dialect turns its provider's frames into.

Each event is an immutable value carrying ``seq``, the sequence number of the frame it came from.
All events of one frame share that seq and are committed to a ``Message`` together or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .finish import FinishReason, Status

__all__ = [
    "ErrorEvent",
    "Event",
    "Finish",
    "MessageStart",
    "Ping",
    "ReasoningDelta",
    "StreamEnd",
    "TextDelta",
    "ToolCallDelta",
    "UnknownEvent",
    "Usage",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageStart:
    """The provider announced the message (id, model)."""

    seq: int
    id: str | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    """A piece of the assistant's visible output text."""

    seq: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningDelta:
    """A piece of reasoning / thinking text, kept apart from the output text.

    ``signature`` carries Anthropic's thinking signature when a frame delivers one.
    """

    seq: int
    text: str = ""
    signature: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDelta:
    """A fragment of a tool call; fragments with the same ``index`` form one call.

    ``id`` and ``name`` come with the first fragment; ``arguments`` is a piece of the JSON text.
    """

    seq: int
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Token counts. A field left ``None`` is not reported by this frame (not zero).

    Later reports replace earlier ones field by field (providers send cumulative counts).
    """

    seq: int = -1
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    """The provider's finish reason, normalized; ``raw`` is the provider's own string.

    ``final=False`` marks a finish reason that more content may still follow, as in Gemini
    streams where every chunk may carry ``finishReason`` (there is no end sentinel): the last
    one stands.
    """

    seq: int
    status: Status
    reason: FinishReason
    raw: str
    final: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent:
    """An error the provider reported inside the stream."""

    seq: int
    type: str
    message: str
    retryable: bool
    raw: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamEnd:
    """The protocol's end marker (``[DONE]``, ``message_stop``, ``done``); not a finish reason."""

    seq: int
    marker: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Ping:
    """A keep-alive frame. It proves the connection lives, not that content is flowing."""

    seq: int


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownEvent:
    """A frame the dialect passes through without meaning: kept, never dropped."""

    seq: int
    type: str
    raw: Any = None


Event = (
    MessageStart
    | TextDelta
    | ReasoningDelta
    | ToolCallDelta
    | Usage
    | Finish
    | ErrorEvent
    | StreamEnd
    | Ping
    | UnknownEvent
)
