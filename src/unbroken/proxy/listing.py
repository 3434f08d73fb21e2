"""``GET /v1/streams``: the caller's own streams, newest first (an app whose page reloaded and
lost a stream id asks "which of mine are still running?").

Only the streams created with the request's credential (its hash, ``access.credential_hash``);
a stream token grants one stream, never a listing. Without a credential: 401. Query:
``?status=streaming,interrupted`` (comma-separated or repeated), ``?limit=`` (1 to 1,000,
default 100), ``?cursor=`` (a page's ``next_cursor``; give the same ``status``). The answer::

    {"streams": [{"id", "status", "finish_reason", "created", "updated", "last_seq",
                  "dialect", "request_path"}, ...],
     "next_cursor": "..." | null}

No token or hash is ever in it. A stream past its retention that the journal has not purged
yet is left out, as ``GET /v1/streams/{id}`` answers 404 for it: such a page may hold fewer
than ``limit`` streams and still have a ``next_cursor``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..streams.access import credential_hash
from ..streams.journal import MAX_PAGE, StreamRecord
from ..streams.journal.listing import DEFAULT_PAGE, parse_statuses
from .launcher import expired
from .wire import error_body

if TYPE_CHECKING:
    from .app import ProxyApp

__all__ = ["list_own_streams", "listed_stream"]


async def list_own_streams(request: Request) -> Response:
    """The route's handler."""
    proxy: ProxyApp = request.app.state.proxy
    owner = credential_hash(request.headers, request.query_params)
    if owner is None:
        return _refused(401, "unbroken proxy: listing streams needs the credential that "
                             "created them (Authorization, x-api-key, x-goog-api-key or ?key=)")
    try:
        statuses = parse_statuses(request.query_params.getlist("status")) or None
        limit = _limit(request.query_params.get("limit"))
        page = await proxy.journal.list_streams(
            credential_hash=owner, status=statuses, limit=limit,
            cursor=request.query_params.get("cursor"))
    except ValueError as error:
        return _refused(400, f"unbroken proxy: {error}")
    retention = proxy.config.retention
    streams = [listed_stream(record) for record in page.streams
               if not expired(proxy.journal, record, retention)]
    response = JSONResponse({"streams": streams, "next_cursor": page.next_cursor})
    response.headers["cache-control"] = "no-store"
    return response


def listed_stream(record: StreamRecord) -> dict[str, Any]:
    """One stream of the answer: what an app needs to find and resume it, nothing secret."""
    meta, state = record.meta, record.state
    return {"id": meta.stream_id, "status": state.status.value,
            "finish_reason": state.finish_reason, "created": meta.created,
            "updated": state.updated, "last_seq": state.last_seq, "dialect": meta.dialect,
            "request_path": meta.request_path}


def _limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_PAGE
    if not value.isascii() or not value.isdigit() or len(value) > 6:
        raise ValueError(f"limit must be 1 to {MAX_PAGE}, not {value[:20]!r}")
    return int(value)


def _refused(status: int, message: str) -> Response:
    return JSONResponse(error_body(None, status, message), status_code=status)
