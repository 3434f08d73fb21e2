"""An in-process httpx2 transport that serves an SDK one fixed body, whole or cut off.

The openai, anthropic and google-genai SDKs read with httpx2 here, so the unit tests of their
wrappers hand a client this transport instead of a server. (The ollama package reads with httpx:
its tests build their own ``httpx.MockTransport``.)
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx2


def fixed_body(
    body: bytes,
    *,
    status: int = 200,
    content_type: str = "text/event-stream",
    broken: bool = False,
) -> httpx2.MockTransport:
    """Every request gets ``body``; ``broken``: the connection resets after it (sync only)."""

    def respond(request: httpx2.Request) -> httpx2.Response:
        def chunks() -> Iterator[bytes]:
            yield body
            raise httpx2.ReadError("connection reset by peer")

        headers = {"content-type": content_type}
        return httpx2.Response(status, headers=headers, content=chunks() if broken else body)

    return httpx2.MockTransport(respond)
