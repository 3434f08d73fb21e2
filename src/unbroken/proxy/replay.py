"""Serving a stream downstream: the frames after a seq from the journal, then the live tail.

The same body serves a new stream's POST (after 0), a re-POST with ``Last-Event-ID`` and
``GET /v1/streams/{id}/events``: the reader only ever pulls from the journal by cursor, so a
client that reconnects gets exactly the frames it missed, and a slow one never grows memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

from starlette.responses import StreamingResponse

from ..streams.journal import Journal
from .producer_lost import reattachable
from .wire import Downstream, error_frame

__all__ = ["SSE_HEADERS", "end_notice", "frames_body", "stream_response"]

# Never cache or buffer a stream (nginx honours X-Accel-Buffering).
SSE_HEADERS = (("cache-control", "no-cache"), ("x-accel-buffering", "no"))
_OWN_HEADERS = frozenset({"content-type", "cache-control", "x-accel-buffering"})


async def frames_body(
    journal: Journal, stream_id: str, after: int, downstream: Downstream, keepalive: float,
) -> AsyncIterator[bytes]:
    """The response body: one chunk per batch of frames, keep-alives while the tail is idle,
    then, if the stream did not end with them, the proxy's notice (``end_notice``)."""
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
    notice = await end_notice(journal, stream_id, downstream)
    if notice is not None:
        yield notice


async def end_notice(journal: Journal, stream_id: str, downstream: Downstream) -> bytes | None:
    """What a response whose frames ran out says last, read when they ran out (not when it
    began: a replica's recovery may have settled the stream meanwhile). ``None`` for a stream
    that ended with its frames. Otherwise the dialect's error frame, without an id and not
    journaled, so that the official SDKs raise instead of ending quietly on half a sentence:
    ``proxy_restarted`` for a background stream left by a dead producer (its owner's next
    resume re-attaches it upstream), ``stream_incomplete`` for one whose frames stopped before
    its end (a failed commit, a producer in a process this journal cannot follow, a stream the
    journal lost). A reconnect with ``Last-Event-ID`` picks up where this response ended."""
    record = await journal.get(stream_id, with_text=False)
    if record is not None and reattachable(record):
        code, detail = "proxy_restarted", (
            "unbroken proxy: the stream stopped with the proxy that produced it; its owner's "
            "next resume continues it")
        last_seq = record.state.last_seq
    elif record is not None and record.state.ended:
        return None
    else:
        last_seq = 0 if record is None else record.state.last_seq
        where = "it is no longer in the journal" if record is None else f"after seq {last_seq}"
        code, detail = "stream_incomplete", (
            f"unbroken proxy: this response ended before stream {stream_id} did ({where}); "
            f"reconnect with Last-Event-ID to read on, or see GET /v1/streams/{stream_id}")
    frame = error_frame(downstream.dialect, last_seq + 1, code, detail)
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
) -> StreamingResponse:
    """A streaming response of the frames after ``after``, with the proxy's headers."""
    out = [(name, value) for name, value in headers or () if name.lower() not in _OWN_HEADERS]
    out.append(("content-type", downstream.media_type))
    out.extend(SSE_HEADERS)
    out.append(("unbroken-stream-id", stream_id))
    response = StreamingResponse(
        frames_body(journal, stream_id, after, downstream, keepalive),
        status_code=status_code,
    )
    response.raw_headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in out
    ]
    return response
