"""Bytes the proxy sends downstream: frames re-serialized, keep-alives, and its own error frames.

An SSE frame goes out as ``event:`` (only when the upstream named one), ``id: <stream_id>:<seq>``,
the upstream data verbatim as ``data:`` lines, and a blank line; the first frame of a response
also carries a ``retry:`` hint. Upstream ``id:``/``retry:`` lines are never forwarded.

Two compatibility rules shape the bytes (both found in the official SDKs' decoders):

- The OpenAI and Anthropic SDKs dispatch an event on *every* blank line once an ``id`` was seen,
  even with no data, and the OpenAI SDK then fails to parse that empty data. So a keep-alive is
  a comment line with no blank line after it (``: keep-alive`` then the next frame's fields).
- google-genai reads only ``data: `` lines and parses every other non-blank line as JSON, so the
  Gemini POST gets data lines only: no ``id:``, ``retry:`` or comments (the stream id travels in
  the ``Unbroken-Stream-Id`` header, and frame n of the body is seq n). A bare LF keeps it alive.
  ``GET /v1/streams/{id}/events`` serves every dialect with ids.

Ollama's POST stays NDJSON: the upstream line bytes, one per line, no ids.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..dialects import DIALECT_NAMES, Dialect, get_dialect
from ..jsonparse import dumps_compact
from ..resumption import PROXY_DOMAIN, ProxyMark, event_id_prefix, proxy_error, proxy_mark
from ..streams.journal import FrameRecord

__all__ = [
    "KEEPALIVE_COMMENT",
    "Downstream",
    "downstream_for",
    "error_body",
    "error_frame",
    "proxy_error_message",
    "upstream_framing",
]

KEEPALIVE_COMMENT = b": keep-alive\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Downstream:
    """How one response serializes frames: SSE with or without ids, or NDJSON."""

    media_type: str
    dialect: str  # whose error frame ends a response cut short
    ndjson: bool = False
    ids: bool = True
    keepalive: bytes | None = KEEPALIVE_COMMENT
    retry_ms: int | None = None

    def frames(self, stream_id: str, frames: list[FrameRecord], first: bool) -> bytes:
        """The wire bytes of a batch of frames; ``first`` marks the response's first batch."""
        if self.ndjson:
            return b"".join([frame.data + b"\n" for frame in frames])
        out: list[bytes] = []
        prefix = event_id_prefix(stream_id).encode()
        retry = self.retry_ms if first else None
        for frame in frames:
            if retry is not None:
                out.append(b"retry: %d\n" % retry)
                retry = None
            if frame.event is not None:
                out.append(b"event: " + frame.event.encode() + b"\n")
            if self.ids:
                out.append(b"id: " + prefix + b"%d\n" % frame.seq)
            for line in frame.data.split(b"\n"):
                out.append(b"data: " + line + b"\n")
            out.append(b"\n")
        return b"".join(out)


def downstream_for(dialect: str, media_type: str, *, events_endpoint: bool,
                   retry_ms: int | None, accept: str = "") -> Downstream:
    """The serialization for a dialect's own POST, or for the generic SSE events endpoint.

    A Gemini POST carries only ``data:`` lines unless the request's ``accept`` names
    ``text/event-stream``: google-genai reads any other line as a piece of JSON and fails on an
    ``id:``, and it asks for ``*/*``; an SSE client that asks for the media type gets the ids
    (and can resume with ``Last-Event-ID``) like every other dialect.
    """
    if events_endpoint:
        return Downstream(media_type="text/event-stream; charset=utf-8", dialect=dialect,
                          retry_ms=retry_ms)
    if dialect == "ollama":
        return Downstream(media_type=media_type, dialect=dialect, ndjson=True, ids=False,
                          keepalive=None)
    if dialect == "gemini" and "text/event-stream" not in accept.lower():
        return Downstream(media_type=media_type, dialect=dialect, ids=False, keepalive=b"\n")
    return Downstream(media_type=media_type, dialect=dialect, retry_ms=retry_ms)


def upstream_framing(dialect: str, media_type: str) -> Downstream:
    """Frames as the upstream's own wire carried them (the evidence export): SSE ``event:``
    (when named) and ``data:`` lines and a blank line, or an NDJSON line; no ids, no hints.
    What the upstream sent besides (``id:``/``retry:`` lines, comments) was never journaled."""
    return Downstream(media_type=media_type, dialect=dialect, ndjson=dialect == "ollama",
                      ids=False, keepalive=None)


def error_frame(dialect: str, seq: int, mark: ProxyMark,
                provider_seq: int | None = None) -> FrameRecord:
    """A frame the proxy writes itself (``resumption.py``: the dialect's error shape, so the
    official SDKs raise instead of ending quietly on half a sentence, with the proxy's mark);
    its receive time is now, when the proxy made it."""
    event, payload = proxy_error(_shaper(dialect), mark, provider_seq)
    return FrameRecord(seq, event, dumps_compact(payload).encode(), "", time.time())


def proxy_error_message(dialect: str, frame: FrameRecord) -> str | None:
    """The message of a frame the proxy made itself (``error_frame``), or ``None`` for any
    other frame."""
    if PROXY_DOMAIN.encode() not in frame.data:
        return None
    try:
        payload = json.loads(frame.data)
    except ValueError:
        return None
    mark = proxy_mark(_shaper(dialect), payload)
    return None if mark is None else mark.message


def error_body(dialect: str | None, status: int, message: str) -> dict[str, Any]:
    """A whole (non-streamed) error body in the dialect's format, for the proxy's own errors;
    the OpenAI shape where no dialect applies (``GET /v1/streams``)."""
    return _shaper(dialect).error_body(status, message)


def _shaper(dialect: str | None) -> Dialect:
    """Whose error shape the proxy's frame or body takes: the provider's, else the OpenAI one
    (no dialect: ``GET /v1/streams``; an app stream of ``unbroken.server`` in the journal)."""
    return get_dialect(dialect if dialect in DIALECT_NAMES else "openai-chat")
