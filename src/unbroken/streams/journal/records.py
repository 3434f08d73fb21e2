"""The journal's record values: a stream's fixed meta, its changing state, its frames, its
producer lease, and what is kept of it once purged.

They are apart from ``base.py`` (the ``Journal`` interface) because every backend's storage
mapping (``sqlite_schema.py``, ``redis_records.py``), the listing and the live tails build and read
them without needing the interface, and the proxy hands them around far from any journal.
Values only: nothing here does I/O. Nothing secret is in them: credentials and stream tokens
only as SHA-256 hashes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ...finish import END_STATES, Status

__all__ = [
    "STATE_EVERY",
    "FrameRecord",
    "Lease",
    "StreamMeta",
    "StreamRecord",
    "StreamState",
    "Tombstone",
]

STATE_EVERY = 1.0
"""Seconds between rewrites of a live stream's stored state for progress alone (its frames
tell the last seq anyway); any other change is written with the append that makes it."""


class FrameRecord(NamedTuple):
    """One upstream frame as journaled.

    ``event`` is the SSE event type when the upstream named one other than ``message`` (else
    ``None``; always ``None`` for NDJSON). ``data`` is the SSE data (UTF-8, lines joined by LF) or
    the NDJSON line without its terminator. ``text`` is the output text the frame added, so that
    a stream's text can be rebuilt without the dialect.

    ``at`` is when the proxy finished reading the frame from the upstream, in epoch seconds (a
    frame the proxy made itself, such as its error frame: when it was made). ``0.0`` means
    unknown: a frame journaled before receive times were kept (a SQLite file of schema 3 or
    older, a Redis entry without its ``a`` field).
    """

    seq: int
    event: str | None
    data: bytes
    text: str = ""
    at: float = 0.0


class Lease(NamedTuple):
    """Which proxy process produces a stream, and until when (epoch seconds) that holds unless
    the process renews it. A stream whose lease ran out has no producer any more."""

    owner: str
    expires: float



@dataclass(frozen=True, slots=True, kw_only=True)
class Tombstone:
    """What is kept of a purged stream for one more retention period: who may read it, so that
    its owner's EventSource gets 204 (stop reconnecting) instead of 404."""

    stream_id: str
    token_hash: str
    credential_hash: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamMeta:
    """What is fixed when a stream is created."""

    stream_id: str
    dialect: str
    created: float
    media_type: str
    token_hash: str
    credential_hash: str | None = None
    request_path: str = ""
    # End-to-end upstream response headers (no cookies), repeated on a resume's response.
    response_headers: tuple[tuple[str, str], ...] = ()
    # Hashes of (credential, Idempotency-Key) and of the request (path and body).
    idempotency_hash: str | None = None
    request_hash: str | None = None
    background: bool = False  # a Responses background stream (resumable upstream)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamState:
    """What changes as a stream goes; written with every append."""

    status: Status
    updated: float
    last_seq: int = 0
    finish_reason: str | None = None
    raw_finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    upstream_requests: int = 1
    provider_id: str | None = None

    @property
    def ended(self) -> bool:
        return self.status in END_STATES

    @property
    def usage_missing(self) -> str | None:
        """Why ``usage`` is ``None`` (``None`` when it is not): a stream without usage says so,
        never reads as zero tokens. ``usage`` is the last the upstream reported, kept whatever
        the end, so a cancelled or interrupted stream has what arrived before it."""
        if self.usage is not None:
            return None
        if not self.ended:
            return "the upstream has not reported usage yet"
        if self.status in (Status.CANCELLED, Status.INTERRUPTED):
            return f"the stream ended {self.status.value} before the upstream reported usage"
        return "the upstream reported no usage"

    def must_write_after(self, written: StreamState | None) -> bool:
        """Whether this state must be stored now, ``written`` being the one stored last."""
        return (
            written is None
            or self.ended
            or self.updated - written.updated >= STATE_EVERY
            or _material(self) != _material(written)
        )


def _material(state: StreamState) -> tuple[Any, ...]:
    """What in a state must be written at once (progress alone may wait)."""
    return (state.status, state.finish_reason, state.raw_finish_reason, state.usage,
            state.error, state.upstream_requests, state.provider_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamRecord:
    """A stream as ``get`` returns it; ``text`` is rebuilt from its frames."""

    meta: StreamMeta
    state: StreamState
    text: str = ""

    def summary(self) -> dict[str, Any]:
        """The JSON body of ``GET /v1/streams/{id}`` (no hashes, no headers)."""
        meta, state = self.meta, self.state
        return {
            "id": meta.stream_id,
            "dialect": meta.dialect,
            "status": state.status.value,
            "finish_reason": state.finish_reason,
            "raw_finish_reason": state.raw_finish_reason,
            "text": self.text,
            "last_seq": state.last_seq,
            "usage": state.usage,
            "usage_missing": state.usage_missing,
            "error": state.error,
            "created": meta.created,
            "updated": state.updated,
            "upstream_requests": state.upstream_requests,
            "provider_id": state.provider_id,
        }
