"""Answers the proxy passes through or makes itself, outside of the journaled streams: an
upstream's answer relayed untouched, an unreachable upstream, an unknown stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .routing import Endpoint, response_headers
from .wire import error_body

__all__ = ["not_found", "relay", "target", "upstream_unreachable"]


def target(request: Request) -> str:
    """The request's path and query exactly as received (the upstream sees them unchanged)."""
    raw_path: bytes = request.scope.get("raw_path") or request.url.path.encode()
    query: bytes = request.scope.get("query_string", b"")
    return (raw_path + (b"?" + query if query else b"")).decode("latin-1")


def not_found() -> Response:
    return JSONResponse(
        {"error": {"message": "no such stream (unknown, expired, or not yours)",
                   "type": "not_found"}},
        status_code=404,
    )


def upstream_unreachable(endpoint: Endpoint, exc: Exception) -> Response:
    message = f"unbroken proxy: the upstream is unreachable: {exc!r}"
    return JSONResponse(error_body(endpoint.dialect, 502, message), status_code=502)


def relay(response: httpx2.Response) -> Response:
    """The upstream's answer passed through untouched (status, headers, raw body)."""

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        finally:
            await response.aclose()

    relayed = StreamingResponse(body(), status_code=response.status_code)
    relayed.raw_headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in response_headers(response.headers.multi_items(), reencoded=False)
    ]
    return relayed
