"""``ResumableStreams.response``: one stream as SSE, from a client's cursor to the end.

The answer is decided when the response runs (so ``response()`` is a plain call an endpoint
returns):

===========  ===================================================================================
status       when
===========  ===================================================================================
200          SSE: the frames after ``Last-Event-ID`` (``<stream_id>:<seq>``) or ``?after=N`` (0:
             all), then the live tail, keep-alive comments while it is idle, and last the
             ``end`` frame; a response that stops before the stream ended (a journal that
             cannot follow another process's stream, a journal failure) ends with an
             ``event: incomplete`` frame without an id instead, and the client reconnects.
             ``?format=unbroken`` (or ``Accept: text/event-stream; profile=unbroken``): the
             normalized format that ``unbroken.js`` reads (``normalized.py``)
204          the stream ended and the client has every frame, or it expired and this is its
             owner's ``EventSource`` (``Accept: text/event-stream``): stop reconnecting
400          ``Last-Event-ID`` or ``?after=`` is malformed or names another stream, or
             ``?format=`` is neither ``unbroken`` nor ``provider``
404          no such stream for this owner or token (unknown, expired, not theirs)
503          the journal is unavailable (``Retry-After: 1``); nothing is served as complete
===========  ===================================================================================
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ..normalized_sse import MEDIA_TYPE, asks_for_normalized
from ..resumption import LAST_EVENT_ID, STREAM_ID_HEADER, event_id_prefix
from ..streams.access import TOKEN_HEADER, TOKEN_PARAM, events_cursor
from ..streams.app_stream import END_EVENT
from ..streams.journal.failures import JOURNAL_ERRORS
from ..streams.logs import log_event
from .access import may_read
from .frames import KEEPALIVE, sse_bytes
from .normalized import normalized_body

if TYPE_CHECKING:
    from .resumable import ResumableStreams

__all__ = ["OwnerOf", "ResponseSettings", "error_response", "request_token", "stream_response"]

OwnerOf = Callable[[Request], "str | Awaitable[str | None] | None"]
"""How the mountable app learns a request's owner (the app's user id), or ``None``."""

# Never cache or buffer a stream (nginx honours X-Accel-Buffering).
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
log = logging.getLogger("unbroken.server")


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseSettings:
    keepalive: float
    retry_ms: int
    retention: float
    owner_of: OwnerOf | None


def error_response(status: int, kind: str, message: str) -> Response:
    headers = {"retry-after": "1"} if status == 503 else None
    return JSONResponse({"error": {"type": kind, "message": message}}, status_code=status,
                        headers=headers)


def request_token(request: Request) -> str | None:
    return request.headers.get(TOKEN_HEADER) or request.query_params.get(TOKEN_PARAM)


async def owner_of(streams: ResumableStreams, request: Request) -> str | None:
    """The request's owner as the app says it (``owner_of``), or ``None``."""
    find = streams.settings.owner_of
    if find is None:
        return None
    found = find(request)
    return await found if inspect.isawaitable(found) else found


class _StreamResponse(Response):
    """A response whose status is known only once it runs (it reads the journal)."""

    def __init__(self, streams: ResumableStreams, stream_id: str, request: Request,
                 who: str | None) -> None:
        super().__init__(status_code=200)
        self._streams = streams
        self._stream_id = stream_id
        self._request = request
        self._who = who

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            answer = await self._answer()
        except JOURNAL_ERRORS as exc:
            log_event("request.journal_failed", level=logging.ERROR, error=type(exc).__name__,
                      detail=str(exc))
            answer = error_response(503, "journal_unavailable",
                                    f"unbroken.server: the journal is unavailable "
                                    f"({type(exc).__name__}); retry")
        await answer(scope, receive, send)

    async def _answer(self) -> Response:
        streams, stream_id, request, who = self._streams, self._stream_id, self._request, self._who
        accept = request.headers.get("accept", "")
        eventsource = "text/event-stream" in accept
        try:
            normalized = asks_for_normalized(request.query_params.get("format"), accept)
        except ValueError as exc:
            return error_response(400, "invalid_request_error", str(exc))
        token = request_token(request)
        record = await streams.journal.get(stream_id, with_text=False)
        if record is None:
            tomb = await streams.journal.tombstone(stream_id)
            if eventsource and tomb is not None and may_read(tomb.token_hash,
                                                             tomb.credential_hash, who, token):
                return Response(status_code=204)  # purged: its owner's EventSource stops
            return _not_found()
        if not may_read(record.meta.token_hash, record.meta.credential_hash, who, token):
            return _not_found()
        if streams.expired(record):
            return Response(status_code=204) if eventsource else _not_found()
        record = await streams.settled(record, wait=True)
        after = events_cursor(stream_id, request.headers, request.query_params)
        if after is None:
            return error_response(400, "invalid_request_error",
                                  f"{LAST_EVENT_ID} must be {event_id_prefix('<stream_id>')}<seq> "
                                  "of this stream and ?after= a whole number")
        headers = {**_SSE_HEADERS, STREAM_ID_HEADER: stream_id}
        if after:
            streams.resumed(stream_id, after)
        if normalized:  # even after the last frame: the reader gets the end alone
            return StreamingResponse(
                normalized_body(streams.journal, stream_id, after, streams.settings.keepalive),
                media_type=MEDIA_TYPE, headers=headers)
        if record.state.ended and after >= record.state.last_seq:
            return Response(status_code=204)  # nothing more will come: an EventSource stops
        return StreamingResponse(_body(streams, stream_id, after),
                                 media_type="text/event-stream", headers=headers)


def _not_found() -> Response:
    return error_response(404, "not_found", "no such stream (unknown, expired, or not yours)")


async def _body(streams: ResumableStreams, stream_id: str, after: int) -> AsyncIterator[bytes]:
    """The frames, keep-alives while idle, and ``incomplete`` if the end did not come."""
    journal = streams.journal
    settings = streams.settings
    retry: int | None = settings.retry_ms
    ended = False
    problem = ""
    follow = journal.follow(stream_id, after, keepalive=settings.keepalive)
    try:
        async for batch in follow:
            if batch:
                yield sse_bytes(stream_id, batch, retry)
                retry = None
                ended = batch[-1].event == END_EVENT
            else:
                yield KEEPALIVE
    except JOURNAL_ERRORS as exc:
        problem = f"the journal is unavailable ({type(exc).__name__})"
        log.warning("stream %s: reading the journal failed: %r", stream_id, exc)
    finally:
        await follow.aclose()
    if not ended:
        yield await _incomplete(streams, stream_id, problem)


async def _incomplete(streams: ResumableStreams, stream_id: str, problem: str) -> bytes:
    """The last frame of a response that stops before its stream's end: no id (not part of
    the stream), the status as stored, and what to do."""
    status = "unknown"
    last_seq = None
    try:
        record = await streams.journal.get(stream_id, with_text=False)
    except JOURNAL_ERRORS:
        record = None
        problem = problem or "the journal is unavailable"
    if record is not None:
        status, last_seq = record.state.status.value, record.state.last_seq
    message = (f"this response ended before stream {stream_id} did"
               f"{' (' + problem + ')' if problem else ''}; reconnect with Last-Event-ID")
    payload = {"status": status, "last_seq": last_seq, "message": message}
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return b"event: incomplete\ndata: " + data.encode() + b"\n\n"


def stream_response(streams: ResumableStreams, stream_id: str, request: Request,
                    who: str | None) -> Response:
    return _StreamResponse(streams, stream_id, request, who)
