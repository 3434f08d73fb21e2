"""What the drivers share about httpx2: timeouts and its exceptions mapped to ours."""

from __future__ import annotations

import httpx2

from ..errors import ConnectTimeout, StreamError, TransportError
from .session import StreamSession

__all__ = ["BODY_EXCERPT", "as_stream_error", "cut_body", "httpx_timeout"]

BODY_EXCERPT = 2048  # bytes of a non-2xx body kept on UpstreamStatusError


def httpx_timeout(session: StreamSession) -> httpx2.Timeout:
    read = session.socket_read_timeout()
    return httpx2.Timeout(
        connect=session.deadlines.connect, read=read, write=session.deadlines.connect, pool=None
    )


def as_stream_error(exc: httpx2.HTTPError, session: StreamSession) -> StreamError:
    """httpx2's exception as unbroken's, chained, so callers never need to import httpx2."""
    err: StreamError
    if isinstance(exc, httpx2.ConnectTimeout | httpx2.PoolTimeout):
        seconds = session.deadlines.connect or 0.0
        err = ConnectTimeout(f"no connection within {seconds} s", seconds=seconds)
    elif isinstance(exc, httpx2.TimeoutException):
        # A read that saw no byte at all for the socket deadline: report the content deadline
        # that applies at this point of the stream.
        due = session.overdue()
        err = due if due is not None else TransportError(f"{type(exc).__name__}: {exc}")
    else:
        err = TransportError(f"{type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


def cut_body() -> TransportError:
    """The body ended cleanly but the stream did not: for retry and resume, a broken connection."""
    return TransportError("the body ended without a finish reason")
