"""An unbroken proxy's notice that a response ended before its stream did.

When an unbroken proxy stops a response early (``stream_incomplete``, or a stream whose producer
stopped and that its owner may continue), it sends one last error frame without an ``id``: every
frame it journals is numbered, so an unnumbered one is its own. That frame is not part of the
stream. Recognising it is apart from ``StreamReceiver``'s framing and numbering because it is a
convention between unbroken's proxy and client, not anything a provider's wire format says.

``StreamReceiver._frames`` decides which frames are candidates (unnumbered, through a proxy); the
functions here say whether a candidate is a notice and record it. Sans-I/O: stdlib only, no clock.
"""

from __future__ import annotations

from typing import Any

from .events import ErrorEvent, Event
from .framing import ServerSentEvent
from .message import Message
from .trace import IGNORED

__all__ = ["is_gemini_notice", "proxy_notice"]


def proxy_notice(message: Message, dialect: Any, sse: ServerSentEvent, payload: Any, t: float,
                 next_seq: int) -> list[Event] | None:
    """The events of an unnumbered error frame of an unbroken proxy, recorded as a notice: not
    committed (it takes no seq, fails nothing), so the message ends ``interrupted`` at the body's
    end, to be resumed with ``Last-Event-ID``. Any other unnumbered frame: ``None``, and the
    receiver numbers it ``next_seq``, the one after the last."""
    events: list[Event] = dialect.events(sse, payload, next_seq)
    error = next((e for e in events if e.__class__ is ErrorEvent), None)
    if error is None:
        return None
    message.warn("proxy_notice", f"the proxy ended this response early: "
                                 f"{error.type}: {error.message}")
    if message.trace.enabled:
        message.trace.record(-1, None, sse.nbytes, t, events, IGNORED, sse.raw)
    return events


def is_gemini_notice(payload: Any) -> bool:
    """A Gemini error payload an unbroken proxy marked as its notice: a ``google.rpc.ErrorInfo``
    detail of domain ``unbroken``, reason ``STREAM_INCOMPLETE`` (never journaled, so never a
    frame of the stream). A Gemini POST may carry no ids at all, so there the mark tells."""
    error = payload.get("error") if payload.__class__ is dict else None
    details = error.get("details") if error.__class__ is dict else None
    return details.__class__ is list and any(
        detail.__class__ is dict and detail.get("domain") == "unbroken"
        and detail.get("reason") == "STREAM_INCOMPLETE" for detail in details)
