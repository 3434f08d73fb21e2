"""Serving a stream downstream: the frames after a seq from the journal, then the live tail.

The same body serves a new stream's POST (after 0), a re-POST with ``Last-Event-ID`` and
``GET /v1/streams/{id}/events``: the reader only ever pulls from the journal by cursor, so a
client that reconnects gets exactly the frames it missed, and a slow one never grows memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import replace

from starlette.responses import StreamingResponse

from .journal import Journal
from .wire import Downstream, error_frame

__all__ = ["SSE_HEADERS", "events_cursor", "frames_body", "stream_response", "unfinished_end"]

# Never cache or buffer a stream (nginx honours X-Accel-Buffering).
SSE_HEADERS = (("cache-control", "no-cache"), ("x-accel-buffering", "no"))
_OWN_HEADERS = frozenset({"content-type", "cache-control", "x-accel-buffering"})


async def frames_body(
    journal: Journal, stream_id: str, after: int, downstream: Downstream, keepalive: float,
    trailer: bytes | None = None,
) -> AsyncIterator[bytes]:
    """The response body: one chunk per batch of frames, keep-alives while the tail is idle,
    then ``trailer`` (bytes that are not a journaled frame) if given."""
    first = True
    follow = journal.follow(
        stream_id, after, keepalive=keepalive if downstream.keepalive is not None else None
    )
    try:
        async for batch in follow:
            if batch:
                yield downstream.frames(stream_id, batch, first)
                first = False
            elif downstream.keepalive is not None:
                yield downstream.keepalive
    finally:
        await follow.aclose()
    if trailer is None:
        trailer = await unfinished_end(journal, stream_id, downstream)
    if trailer is not None:
        yield trailer


async def unfinished_end(journal: Journal, stream_id: str,
                         downstream: Downstream) -> bytes | None:
    """For a response whose frames ran out before the stream ended (its producer stopped on a
    failed commit, or runs in a process this journal cannot follow): the dialect's error frame,
    without an id and not journaled, so that the official SDKs raise instead of ending quietly
    on half a sentence, and a reconnect with ``Last-Event-ID`` picks up where this ended."""
    record = await journal.get(stream_id, with_text=False)
    if record is not None and record.state.ended:
        return None
    # No record: the stream went away under the reader (a purge, or a Redis that lost it).
    if record is None:
        last_seq, where = 0, "it is no longer in the journal"
    else:
        last_seq = record.state.last_seq
        where = f"after seq {last_seq}"
    frame = error_frame(downstream.dialect, last_seq + 1, "stream_incomplete",
                        f"unbroken proxy: this response ended before stream {stream_id} did "
                        f"({where}); reconnect with Last-Event-ID to read on, or see "
                        f"GET /v1/streams/{stream_id}")
    return replace(downstream, ids=False, retry_ms=None).frames(stream_id, [frame], first=False)


def stream_response(
    journal: Journal,
    stream_id: str,
    after: int,
    downstream: Downstream,
    *,
    keepalive: float,
    status_code: int = 200,
    headers: list[tuple[str, str]] | None = None,
    trailer: bytes | None = None,
) -> StreamingResponse:
    """A streaming response of the frames after ``after``, with the proxy's headers."""
    out = [(name, value) for name, value in headers or () if name.lower() not in _OWN_HEADERS]
    out.append(("content-type", downstream.media_type))
    out.extend(SSE_HEADERS)
    out.append(("unbroken-stream-id", stream_id))
    response = StreamingResponse(
        frames_body(journal, stream_id, after, downstream, keepalive, trailer),
        status_code=status_code,
    )
    response.raw_headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in out
    ]
    return response


def events_cursor(
    stream_id: str, headers: Mapping[str, str], query: Mapping[str, str]
) -> int | None:
    """The seq to serve after: ``Last-Event-ID`` wins over ``?after=``; ``None`` if either is
    malformed or names another stream."""
    last_event_id = headers.get("last-event-id")
    if last_event_id:
        named, colon, seq = last_event_id.strip().rpartition(":")
        if not colon or named != stream_id or not seq.isascii() or not seq.isdigit():
            return None
        return int(seq)
    after = query.get("after")
    if after is None:
        return 0
    if not after.isascii() or not after.isdigit():
        return None
    return int(after)
