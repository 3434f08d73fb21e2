"""The normalized event format on the wire: one SSE format for every dialect.

A reader that asks for it (``?format=unbroken``, or ``Accept: text/event-stream;
profile=unbroken``) gets unbroken's own events instead of the provider's bytes, so that a page
learns why a stream ended without parsing five chunk formats. One SSE event per committed frame
that says something, each with ``id: <stream_id>:<seq>`` (the seq of the frame it came from), so
a resume by ``Last-Event-ID`` works as it does for the provider's bytes:

- ``event: status`` ``{"status": "streaming"}``: the stream's status changed (not to an end);
- ``event: delta`` with any of ``"text"``, ``"reasoning"``, ``"tool_calls"`` (``[{"index",
  "id"?, "name"?, "arguments"}]``: a delta belongs to the call its id names, else to the call at
  its index; a provider may give parallel calls one index) and ``"status"`` when the same frame
  changed it;
- ``event: end``, last: ``status``, ``finish_reason``, ``raw_finish_reason``, ``error``
  (``{"type", "message"}`` or ``null``), ``frames`` (committed frames) and ``chars`` (code
  points of text). Its id is the stream's last committed seq: a reader that saw that frame but
  not the end asks again with that id and gets the end alone.

Frames with nothing to show (pings, usage, the ``[DONE]`` marker) send nothing; their seqs are
skipped, which a reader deduplicating by "seq above the last one" does not notice.

``NormalizedEncoder`` is sans-I/O: committed frames in (``frame(seq, events)``), bytes out; the
proxy's events endpoint drives it, and ``unbroken.server`` can for its own streams.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._jsonparse import dumps_compact
from .errors import ProviderError, StreamError
from .events import Event, ReasoningDelta, TextDelta, ToolCallDelta
from .finish import END_STATES, Status
from .message import Message
from .resumption import event_id_prefix

__all__ = [
    "FORMAT",
    "KINDS",
    "MEDIA_TYPE",
    "NormalizedEncoder",
    "StreamEnding",
    "asks_for_normalized",
]

FORMAT = "unbroken"
"""The value of ``?format=`` and of the ``profile`` parameter of ``Accept`` that ask for it."""

MEDIA_TYPE = "text/event-stream; charset=utf-8; profile=unbroken"

KINDS = ("status", "delta", "end")
"""Every ``event:`` name of the format; a reader treats any other as a malformed stream."""

PROVIDER_FORMAT = "provider"


def asks_for_normalized(query_format: str | None, accept: str) -> bool:
    """Whether a request asks for this format: ``?format=unbroken`` wins over ``Accept``;
    ``?format=provider`` (or none, without the profile) is the provider's own bytes.
    ``ValueError`` names any other ``format`` value."""
    if query_format is not None:
        if query_format not in (FORMAT, PROVIDER_FORMAT):
            raise ValueError(
                f"unknown format {query_format!r}; valid: {FORMAT!r}, {PROVIDER_FORMAT!r}")
        return query_format == FORMAT
    for media_range in accept.lower().split(","):
        essence, *parameters = (part.strip() for part in media_range.split(";"))
        if essence == "text/event-stream" and any(
            parameter.replace(" ", "") in (f"profile={FORMAT}", f'profile="{FORMAT}"')
            for parameter in parameters
        ):
            return True
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamEnding:
    """How a stream ended, as the ``end`` event says it."""

    status: Status
    finish_reason: str | None = None
    raw_finish_reason: str | None = None
    error_type: str | None = None
    error_message: str | None = None

    def __post_init__(self) -> None:
        if self.status not in END_STATES:
            raise ValueError(f"{self.status.value!r} is not an end state")

    @classmethod
    def of_message(cls, message: Message) -> StreamEnding:
        """The ending of a closed ``Message``."""
        reason = message.finish_reason
        error_type, error_message = _error_fields(message.error)
        return cls(status=message.status, finish_reason=None if reason is None else reason.value,
                   raw_finish_reason=message.raw_finish_reason, error_type=error_type,
                   error_message=error_message)

    @classmethod
    def of_fields(cls, status: Status, finish_reason: str | None, raw_finish_reason: str | None,
                  error: Mapping[str, Any] | None) -> StreamEnding:
        """From stored fields (a journal's state: ``error`` as ``{"type", "message"}``)."""
        error = error or {}
        error_type, error_message = error.get("type"), error.get("message")
        return cls(status=status, finish_reason=finish_reason,
                   raw_finish_reason=raw_finish_reason,
                   error_type=error_type if isinstance(error_type, str) else None,
                   error_message=error_message if isinstance(error_message, str) else None)


def _error_fields(error: StreamError | None) -> tuple[str | None, str | None]:
    if error is None:
        return None, None
    if isinstance(error, ProviderError):
        return error.event.type, error.event.message
    return type(error).__name__, str(error)


class NormalizedEncoder:
    """One stream's committed frames in, the normalized format's bytes out.

    ``frame(seq, events)`` commits a frame's events to ``message`` (a duplicate or a frame the
    state machine rejects changes nothing and sends nothing) and returns its SSE event (or
    ``committed`` for a frame the message already has), or
    ``b""`` when it says nothing or its seq is not above ``after`` (the reader has it: a
    resume still feeds every frame from the first, so that counts and state are whole).
    ``close(error, cancelled=...)`` ends the message and returns the ``end`` event;
    ``end(ending)`` does so with an ending known from elsewhere (the proxy's journal).
    """

    def __init__(self, stream_id: str, *, after: int = 0, message: Message | None = None) -> None:
        self.stream_id = stream_id
        self.after = after
        self.message = message if message is not None else Message(trace=False)
        self.frames = 0
        self.chars = 0
        self.ended = False
        self._prefix = "id: " + event_id_prefix(stream_id)
        self._status = self.message.status

    def frame(self, seq: int, events: Sequence[Event]) -> bytes:
        if self.ended:
            raise ValueError("frame() after the end was encoded")
        if not self.message.commit(seq, events):
            return b""
        return self.committed(seq, events)

    def committed(self, seq: int, events: Sequence[Event]) -> bytes:
        """Like ``frame``, for a frame that ``message`` already committed (a ``StreamReceiver``
        built on the same message commits as it parses: one copy of the text, not two)."""
        if self.ended:
            raise ValueError("frame() after the end was encoded")
        self.frames += 1
        data: dict[str, Any] = {}
        text = [event.text for event in events if event.__class__ is TextDelta]
        if text:
            data["text"] = "".join(text)
            self.chars += len(data["text"])
        reasoning = [event.text for event in events
                     if event.__class__ is ReasoningDelta and event.text]
        if reasoning:
            data["reasoning"] = "".join(reasoning)
        calls = [_tool_call(event) for event in events if isinstance(event, ToolCallDelta)]
        if calls:
            data["tool_calls"] = calls
        status = self.message.status
        changed = status is not self._status and status not in END_STATES
        if changed:
            self._status = status
            data["status"] = status.value
        if not data or seq <= self.after:
            return b""
        return self._event("delta" if not changed or len(data) > 1 else "status", seq, data)

    def close(self, error: StreamError | None = None, *, cancelled: bool = False) -> bytes:
        """Close the message (see ``Message.close``) and encode its ending."""
        self.message.close(error, cancelled=cancelled)
        return self.end(StreamEnding.of_message(self.message))

    def end(self, ending: StreamEnding) -> bytes:
        if self.ended:
            raise ValueError("the end was already encoded")
        self.ended = True
        error = None if ending.error_type is None and ending.error_message is None else {
            "type": ending.error_type, "message": ending.error_message}
        return self._event("end", max(self.message.last_seq, 0), {
            "status": ending.status.value,
            "finish_reason": ending.finish_reason,
            "raw_finish_reason": ending.raw_finish_reason,
            "error": error,
            "frames": self.frames,
            "chars": self.chars,
        })

    def _event(self, kind: str, seq: int, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\n{self._prefix}{seq}\ndata: {dumps_compact(data)}\n\n".encode()


def _tool_call(event: ToolCallDelta) -> dict[str, Any]:
    call: dict[str, Any] = {"index": event.index}
    if event.id is not None:
        call["id"] = event.id
    if event.name is not None:
        call["name"] = event.name
    call["arguments"] = event.arguments
    return call
