"""A request that fails on the journal gets 503 in its dialect's error format, not a bare 500.

A full disk under SQLite, a Redis that went away: the proxy cannot serve the stream now, but
may in a moment (``Retry-After: 1``), so an SDK or ``unbroken.stream`` retries or resumes later.
Only the error's type is sent; the detail (paths, hosts) goes to the log.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..streams.journal.failures import JOURNAL_ERRORS
from ..streams.logs import log_event
from .routing import endpoint_for
from .wire import error_body

__all__ = ["JOURNAL_ERRORS", "journal_failed"]


async def journal_failed(request: Request, error: Exception) -> Response:
    """Starlette's handler for ``JOURNAL_ERRORS`` raised while answering a request."""
    endpoint = endpoint_for(request.method, request.url.path, request.headers)
    log_event("request.journal_failed", level=logging.ERROR, path=request.url.path,
              error=type(error).__name__, detail=str(error))
    message = f"unbroken proxy: the journal is unavailable ({type(error).__name__}); retry"
    return JSONResponse(error_body(endpoint.dialect, 503, message), status_code=503,
                        headers={"retry-after": "1"})
