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

A dialect whose framing has no ids keeps its own on its POST: Ollama's NDJSON is the upstream
line bytes, one per line; Bedrock's event stream is the upstream messages, byte for byte. Such a
body carries no ids: the stream id is in the ``Unbroken-Stream-Id`` header and frame n of a body
that resumes after seq k is seq k+n, so a client that counts frames resumes with
``Last-Event-ID: <stream_id>:<seq>`` like any other. A binary framing cannot travel as SSE data:
``GET /v1/streams/{id}/events`` serves it in its own framing too (resume with ``Last-Event-ID``
or ``?after=``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..dialects import Dialect, find_dialect
from ..dialects.openai_chat import OpenAIChatDialect
from ..errors import StreamError
from ..framing import SSE, Framing
from ..resumption import PROXY_DOMAIN, ProxyMark, event_id_prefix, proxy_error, proxy_mark
from ..streams.journal import FrameRecord

__all__ = [
    "KEEPALIVE_COMMENT",
    "Downstream",
    "downstream_for",
    "error_body",
    "error_frame",
    "framing_of",
    "proxy_error_message",
    "upstream_framing",
]

KEEPALIVE_COMMENT = b": keep-alive\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Downstream:
    """How one response serializes frames: SSE with or without ids, or the dialect's own
    framing (NDJSON lines, event-stream messages) as journaled."""

    media_type: str
    dialect: str  # whose error frame ends a response cut short
    framing: Framing = SSE
    ids: bool = True
    keepalive: bytes | None = KEEPALIVE_COMMENT
    retry_ms: int | None = None

    def frames(self, stream_id: str, frames: list[FrameRecord], first: bool) -> bytes:
        """The wire bytes of a batch of frames; ``first`` marks the response's first batch."""
        if self.framing is not SSE:
            end = self.framing.terminator
            return b"".join([frame.data + end for frame in frames])
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
    spec = find_dialect(dialect)
    framing = framing_of(dialect)
    if events_endpoint and framing.text:
        return Downstream(media_type="text/event-stream; charset=utf-8", dialect=dialect,
                          retry_ms=retry_ms)
    if not framing.ids:
        return Downstream(media_type=media_type, dialect=dialect, framing=framing,
                          ids=False, keepalive=None)
    ids_when_accepted = spec is not None and spec.ids_when_accepted
    if ids_when_accepted and "text/event-stream" not in accept.lower():
        return Downstream(media_type=media_type, dialect=dialect, ids=False, keepalive=b"\n")
    return Downstream(media_type=media_type, dialect=dialect, retry_ms=retry_ms)


def upstream_framing(dialect: str, media_type: str) -> Downstream:
    """Frames as the upstream's own wire carried them (the evidence export): SSE ``event:``
    (when named) and ``data:`` lines and a blank line, or an NDJSON line; no ids, no hints.
    What the upstream sent besides (``id:``/``retry:`` lines, comments) was never journaled."""
    return Downstream(media_type=media_type, dialect=dialect, framing=framing_of(dialect),
                      ids=False, keepalive=None)


def framing_of(dialect: str) -> Framing:
    """A provider's framing; SSE for a stream of no provider (an app stream of
    ``unbroken.server`` in the same journal)."""
    spec = find_dialect(dialect)
    return SSE if spec is None else spec.framing


def error_frame(dialect: str, seq: int, mark: ProxyMark,
                provider_seq: int | None = None) -> FrameRecord:
    """A frame the proxy writes itself (``resumption.py``: the dialect's error shape, so the
    official SDKs raise instead of ending quietly on half a sentence, with the proxy's mark);
    its receive time is now, when the proxy made it."""
    shaper = _shaper(dialect)
    event, payload = proxy_error(shaper, mark, provider_seq)
    return FrameRecord(seq, event, shaper.frame_bytes(payload), "", time.time())


def proxy_error_message(dialect: str, frame: FrameRecord) -> str | None:
    """The message of a frame the proxy made itself (``error_frame``), or ``None`` for any
    other frame."""
    if PROXY_DOMAIN.encode() not in frame.data:
        return None
    shaper = _shaper(dialect)
    try:
        if shaper.framing.text:
            payload = json.loads(frame.data)
        else:  # a binary message (Bedrock's event stream): its payload as the dialect reads it
            decoded = shaper.framing.new_decoder(len(frame.data)).receive_data(frame.data)
            payload = shaper.load(decoded[0]) if len(decoded) == 1 else None
    except (ValueError, StreamError):
        return None
    mark = proxy_mark(shaper, payload)
    return None if mark is None else mark.message


def error_body(dialect: str | None, status: int, message: str) -> dict[str, Any]:
    """A whole (non-streamed) error body in the dialect's format, for the proxy's own errors;
    the OpenAI shape where no dialect applies (``GET /v1/streams``)."""
    return _shaper(dialect).error_body(status, message)


def _shaper(dialect: str | None) -> Dialect:
    """Whose error shape the proxy's frame or body takes: the provider's, else the OpenAI one
    (no dialect: ``GET /v1/streams``; an app stream of ``unbroken.server`` in the journal)."""
    found = find_dialect(dialect) if dialect is not None else None
    return (found or OpenAIChatDialect)()
