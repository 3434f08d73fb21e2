"""``ResumableStreams.app``: the streams as a Starlette app to mount beside an app's routes.

=========================  =========================================================================
``GET  /``                 the owner's streams, newest first (401 without an owner): ``?limit=``,
                           ``?cursor=`` (a page's ``next_cursor``)
``GET  /{id}``             how the stream stands (``ResumableStreams.get``)
``GET  /{id}/events``      the stream as SSE (``ResumableStreams.response``)
``POST /{id}/cancel``      stop it (``cancelled``); the stream as ``GET /{id}`` says
``GET  /unbroken.js``      the browser module (``unbroken.web``); mounted at ``/v1/streams``,
                           its ``attach("", id, {token})`` reads and stops app streams
=========================  =========================================================================

The owner is what ``ResumableStreams(owner_of=...)`` says of the request (the app's own
authentication); without it, only a stream token (``?token=`` or ``Unbroken-Stream-Token``)
grants a stream. Mounting does not run the mounted app's lifespan: the app that mounts it
gives ``lifespan=streams.lifespan``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import StreamNotFoundError
from ..streams.journal import MAX_PAGE
from ..streams.journal.failures import JOURNAL_ERRORS
from ..streams.logs import log_event
from ..web import SCRIPT_PATH, script_response
from .access import owner_hash, summary
from .responses import error_response, owner_of, request_token

if TYPE_CHECKING:
    from .resumable import ResumableStreams

__all__ = ["mountable_app"]


def mountable_app(streams: ResumableStreams) -> Starlette:
    async def listing(request: Request) -> Response:
        owner = await owner_of(streams, request)
        if owner is None:
            return error_response(401, "unauthorized", "listing streams needs an owner")
        limit = request.query_params.get("limit", "100")
        if not limit.isascii() or not limit.isdigit() or not 1 <= int(limit) <= MAX_PAGE:
            return error_response(400, "invalid_request_error",
                                  f"?limit= must be 1 to {MAX_PAGE}")
        try:
            page = await streams.journal.list_streams(
                credential_hash=owner_hash(owner), limit=int(limit),
                cursor=request.query_params.get("cursor"))
        except ValueError as exc:
            return error_response(400, "invalid_request_error", str(exc))
        return JSONResponse({"streams": [summary(record) for record in page.streams],
                             "next_cursor": page.next_cursor})

    async def status(request: Request) -> Response:
        owner = await owner_of(streams, request)
        try:
            found = await streams.get(request.path_params["stream_id"], owner=owner,
                                      token=request_token(request))
        except StreamNotFoundError:
            return _not_found()
        return JSONResponse(found)

    async def events(request: Request) -> Response:
        owner = await owner_of(streams, request)
        return streams.response(request.path_params["stream_id"], request, owner=owner)

    async def cancel(request: Request) -> Response:
        owner = await owner_of(streams, request)
        try:
            found = await streams.cancel(request.path_params["stream_id"], owner=owner,
                                         token=request_token(request))
        except StreamNotFoundError:
            return _not_found()
        return JSONResponse(found)

    async def journal_failed(request: Request, exc: Exception) -> Response:
        log_event("request.journal_failed", level=logging.ERROR, path=request.url.path,
                  error=type(exc).__name__, detail=str(exc))
        return error_response(503, "journal_unavailable",
                              f"unbroken.server: the journal is unavailable "
                              f"({type(exc).__name__}); retry")

    routes = [
        # First: a stream id given by an app may not shadow it.
        Route(SCRIPT_PATH, script_response, methods=["GET"]),
        Route("/", listing, methods=["GET"]),
        Route("/{stream_id}", status, methods=["GET"]),
        Route("/{stream_id}/events", events, methods=["GET"]),
        Route("/{stream_id}/cancel", cancel, methods=["POST"]),
    ]
    return Starlette(routes=routes,
                     exception_handlers={error: journal_failed for error in JOURNAL_ERRORS})


def _not_found() -> Response:
    return error_response(404, "not_found", "no such stream (unknown, expired, or not yours)")
