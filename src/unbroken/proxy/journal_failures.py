"""A request that fails on the journal gets 503 in its dialect's error format, not a bare 500.

A full disk under SQLite, a Redis that went away: the proxy cannot serve the stream now, but
may in a moment (``Retry-After: 1``), so an SDK or ``unbroken.stream`` retries or resumes later.
Only the error's type is sent; the detail (paths, hosts) goes to the log.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..streams.logs import log_event
from .routing import endpoint_for
from .wire import error_body

__all__ = ["JOURNAL_ERRORS", "journal_failed"]


def _journal_errors() -> tuple[type[Exception], ...]:
    """What the journals raise when their storage fails (``TimeoutError`` is an ``OSError``)."""
    errors: list[type[Exception]] = [OSError, sqlite3.Error]
    with contextlib.suppress(ImportError):  # the redis extra
        from redis.exceptions import RedisError

        errors.append(RedisError)
    return tuple(errors)


JOURNAL_ERRORS = _journal_errors()


async def journal_failed(request: Request, error: Exception) -> Response:
    """Starlette's handler for ``JOURNAL_ERRORS`` raised while answering a request."""
    endpoint = endpoint_for(request.method, request.url.path, request.headers)
    log_event("request.journal_failed", level=logging.ERROR, path=request.url.path,
              error=type(error).__name__, detail=str(error))
    message = f"unbroken proxy: the journal is unavailable ({type(error).__name__}); retry"
    return JSONResponse(error_body(endpoint.dialect, 503, message), status_code=503,
                        headers={"retry-after": "1"})
