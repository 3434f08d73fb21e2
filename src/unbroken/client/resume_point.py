"""Where a resume continues: the ``Last-Event-ID`` to send, or the background Responses URL.

Pure functions of what the session knows (its receiver, the message's last seq, the proxy's
``Unbroken-Stream-Id``, the last SSE id seen): no clock, no I/O.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .._jsonparse import loads
from .._receiver import StreamReceiver
from ..resumption import event_id

__all__ = ["background_url", "by_position_through_proxy", "is_background", "last_event_id"]


def last_event_id(receiver: StreamReceiver, last_seq: int, proxy_stream: str | None,
                  last_id: str) -> str:
    """The id of the last committed frame: where a resume must continue from ('' if none)."""
    own = receiver.stream_id
    if own is not None and last_seq >= 0:
        return event_id(own, last_seq)
    if receiver.seq_source == "block_id" and last_seq >= 0:
        return str(last_seq)
    if proxy_stream is None:
        return last_id
    if by_position_through_proxy(receiver, last_seq, proxy_stream):
        return event_id(proxy_stream, last_seq)
    if last_seq < 0 and not last_id:
        # An unbroken proxy answered but no frame of it came: its stream from the start,
        # never a fresh POST (the proxy is still generating the first one).
        return event_id(proxy_stream, 0)
    return last_id


def by_position_through_proxy(receiver: StreamReceiver, last_seq: int,
                              proxy_stream: str | None) -> bool:
    """An unbroken proxy's body without ids (Gemini, Ollama): frame n is the proxy's seq n."""
    return proxy_stream is not None and receiver.seq_source == "position" and last_seq >= 0


def background_url(url: str, response_id: str, last_seq: int) -> str:
    """``GET .../responses/{id}?stream=true&starting_after=N`` for the request's URL."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/") + f"/{response_id}"
    query = f"stream=true&starting_after={last_seq}"
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


def is_background(content: bytes | None) -> bool:
    """Whether a request body asks for a background Responses stream."""
    if content is None or b'"background"' not in content:
        return False
    try:
        body: Any = loads(content)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("background") is True
