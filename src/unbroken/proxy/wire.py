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

from ..dialects import find_dialect
from ..framing import SSE, Framing, encode_message
from ..jsonparse import dumps_compact
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
        prefix = stream_id.encode() + b":"
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


def error_frame(dialect: str, seq: int, code: str, message: str,
                provider_seq: int | None = None) -> FrameRecord:
    """The last frame of a stream that broke, in the dialect's own error format, so that the
    official SDKs raise instead of ending quietly on half a sentence; its receive time is now,
    when the proxy made it."""
    event: str | None = None
    payload: Any
    if not framing_of(dialect).text:
        # An AWS event stream (Bedrock): an exception message, as the service ends a stream
        # it cannot finish; boto3 raises it as EventStreamError.
        data = encode_message(
            {":exception-type": "internalServerException", ":content-type": "application/json",
             ":message-type": "exception"},
            dumps_compact({"message": message, "reason": code}).encode(),
        )
        return FrameRecord(seq, None, data, "", time.time())
    if dialect == "openai-chat":
        payload = {"error": {"message": message, "type": "server_error", "param": None,
                             "code": code}}
    elif dialect == "openai-responses":
        event = "error"
        # The documented event has code/message at the top; the nested "error" object is what
        # makes the OpenAI SDK raise APIError instead of yielding the event quietly.
        payload = {"type": "error", "code": code, "message": message, "param": None,
                   "error": {"type": "server_error", "code": code, "message": message,
                             "param": None}}
        if provider_seq is not None:
            payload["sequence_number"] = provider_seq
    elif dialect == "anthropic":
        event = "error"
        payload = {"type": "error", "error": {"type": "api_error", "message": message}}
    elif dialect == "gemini":
        # Google's way to name an error's cause; it also lets a client tell the proxy's notice
        # (never journaled) from a frame of the stream in a Gemini body that carries no ids.
        payload = {"error": {"code": 500, "message": message, "status": "INTERNAL", "details": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": code.upper(),
             "domain": "unbroken"}]}}
    else:
        payload = {"error": message}
    return FrameRecord(seq, event, dumps_compact(payload).encode(), "", time.time())


_PROXY_MARK = "unbroken proxy: "


def proxy_error_message(dialect: str, frame: FrameRecord) -> str | None:
    """The message of an error frame the proxy made itself (``error_frame``: its message
    starts with ``unbroken proxy:``), or ``None`` for any other frame."""
    if _PROXY_MARK.encode() not in frame.data:
        return None
    try:
        payload = json.loads(frame.data)
        error = payload.get("error")
        if dialect == "openai-responses":
            message = payload.get("message") if payload.get("type") == "error" else None
        elif dialect == "ollama":
            message = error
        else:
            message = error.get("message") if isinstance(error, dict) else None
    except (ValueError, AttributeError):
        return None
    if isinstance(message, str) and message.startswith(_PROXY_MARK):
        return message
    return None


_GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED",
                  502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def error_body(dialect: str | None, status: int, message: str) -> dict[str, Any]:
    """A whole (non-streamed) error body in the dialect's format, for the proxy's own errors."""
    if dialect == "anthropic":
        kind = "not_found_error" if status == 404 else "api_error"
        return {"type": "error", "error": {"type": kind, "message": message}}
    if dialect == "gemini":
        return {"error": {"code": status, "message": message,
                          "status": _GOOGLE_STATUS.get(status, "INTERNAL")}}
    if dialect == "ollama":
        return {"error": message}
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
