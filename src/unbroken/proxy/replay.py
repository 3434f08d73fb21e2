"""Serving a stream downstream: the frames after a seq from the journal, then the live tail.

The same body serves a new stream's POST (after 0), a re-POST with ``Last-Event-ID`` and
``GET /v1/streams/{id}/events``: the reader only ever pulls from the journal by cursor, so a
client that reconnects gets exactly the frames it missed, and a slow one never grows memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

from starlette.responses import StreamingResponse

from ..resumption import (
    LAST_EVENT_ID,
    PROXY_MESSAGE_PREFIX,
    STREAM_ID_HEADER,
    ProxyMark,
)
from ..streams.journal import Journal
from ..streams.logs import log_event
from .producer_lost import reattachable
from .wire import Downstream, error_frame

__all__ = ["SSE_HEADERS", "end_notice", "frames_body", "stream_response"]

# Never cache or buffer a stream (nginx honours X-Accel-Buffering).
SSE_HEADERS = (("cache-control", "no-cache"), ("x-accel-buffering", "no"))
_OWN_HEADERS = frozenset({"content-type", "cache-control", "x-accel-buffering"})


async def frames_body(
    journal: Journal, stream_id: str, after: int, downstream: Downstream, keepalive: float,
    settle: Callable[[], Awaitable[object]] | None = None,
) -> AsyncIterator[bytes]:
    """The response body: one chunk per batch of frames, keep-alives while the tail is idle,
    then, if the stream did not end with them, the proxy's notice (``end_notice``).

    ``settle``: the stream's fate is not known yet (its producer may be alive in another
    process): the response head has gone out, and this waits for it with keep-alives before
    the frames are read. No exception leaves the body (the response has started: it could only
    cut the connection with a traceback): a journal that fails while the body is read ends it
    with the proxy's notice, after one warning line in the log."""
    beat = keepalive if downstream.keepalive is not None else None
    cursor = after
    failed = False
    try:
        if settle is not None:
            async for _ in _waiting(settle(), beat):
                assert downstream.keepalive is not None
                yield downstream.keepalive
        follow = journal.follow(stream_id, after, keepalive=beat)
        try:
            first = True
            async for batch in follow:
                if batch:
                    yield downstream.frames(stream_id, batch, first)
                    first = False
                    cursor = batch[-1].seq
                elif downstream.keepalive is not None:
                    yield downstream.keepalive
        finally:
            await follow.aclose()
    except Exception as error:
        failed = True
        log_event("stream.read_failed", level=logging.WARNING, stream_id=stream_id,
                  seq=cursor, error=type(error).__name__, detail=str(error))
    notice = await end_notice(journal, stream_id, downstream, cursor=cursor, quiet=failed)
    if notice is not None:
        yield notice


async def _waiting(pending: Awaitable[object], beat: float | None) -> AsyncIterator[None]:
    """Yield once every ``beat`` seconds until ``pending`` is done (its errors raised)."""
    task = asyncio.ensure_future(pending)
    try:
        while True:
            done, _ = await asyncio.wait([task], timeout=beat)
            if done:
                task.result()
                return
            yield None
    finally:
        task.cancel()


async def end_notice(journal: Journal, stream_id: str, downstream: Downstream, *,
                     cursor: int = 0, quiet: bool = False) -> bytes | None:
    """What a response whose frames ran out says last, read when they ran out (not when it
    began: a replica's recovery may have settled the stream meanwhile). ``None`` for a stream
    that ended with its frames. Otherwise the dialect's error frame, without an id and not
    journaled, so that the official SDKs raise instead of ending quietly on half a sentence:
    ``proxy_restarted`` for a background stream left by a dead producer (its owner's next
    resume re-attaches it upstream), ``stream_incomplete`` for one whose frames stopped before
    its end (a failed commit, a producer in a process this journal cannot follow, a stream the
    journal lost, a journal that is unavailable: then ``cursor``, the last seq sent, is where
    the notice says the response stopped; ``quiet``: the failure was logged already). A
    reconnect with ``Last-Event-ID`` picks up where this response ended."""
    try:
        record = await journal.get(stream_id, with_text=False)
    except Exception as error:
        if not quiet:
            log_event("stream.read_failed", level=logging.WARNING, stream_id=stream_id,
                      seq=cursor, error=type(error).__name__, detail=str(error))
        record, where, last_seq = None, "the journal is unavailable", cursor
    else:
        last_seq = cursor if record is None else max(cursor, record.state.last_seq)
        where = "it is no longer in the journal" if record is None else f"after seq {last_seq}"
    if record is not None and reattachable(record):
        code, detail = "proxy_restarted", (
            "the stream stopped with the proxy that produced it; its owner's next resume "
            "continues it")
    elif record is not None and (record.state.ended or record.state.finish_reason is not None):
        return None  # ended, or its finish frame was sent: that decides its end (README)
    else:
        code, detail = "stream_incomplete", (
            f"this response ended before stream {stream_id} did ({where}); reconnect with "
            f"{LAST_EVENT_ID} to read on, or see GET /v1/streams/{stream_id}")
    status = "unknown" if record is None else record.state.status.value
    mark = ProxyMark(code=code, status=status, resumable=True,
                     message=PROXY_MESSAGE_PREFIX + detail)
    frame = error_frame(downstream.dialect, last_seq + 1, mark)
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
    settle: Callable[[], Awaitable[object]] | None = None,
) -> StreamingResponse:
    """A streaming response of the frames after ``after``, with the proxy's headers;
    ``settle``: wait for it (with keep-alives) before reading the frames (``frames_body``)."""
    out = [(name, value) for name, value in headers or () if name.lower() not in _OWN_HEADERS]
    out.append(("content-type", downstream.media_type))
    out.extend(SSE_HEADERS)
    out.append((STREAM_ID_HEADER.lower(), stream_id))
    response = StreamingResponse(
        frames_body(journal, stream_id, after, downstream, keepalive, settle),
        status_code=status_code,
    )
    response.raw_headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in out
    ]
    return response
