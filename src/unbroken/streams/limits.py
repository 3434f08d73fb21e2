"""What the proxy refuses, before it spends an upstream request: each limit has its status.

======================  ======  ==============================================================
limit                   status  when
======================  ======  ==============================================================
``max_body``            413     the request body (declared or read) is larger
``max_streams_per_key`` 429     the credential already has that many live streams
``max_streams``         503     the proxy already has that many live streams (``Retry-After``)
(draining)              503     the proxy is shutting down (``Retry-After``)
======================  ======  ==============================================================

A refusal is one line of text, sent in the dialect's own error format so that the official SDKs
raise with it. Live streams are counted by ``StreamSlots``: a slot is taken before the upstream
request and given back when the stream's producer ends (or when no stream came of it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

__all__ = ["DRAINING", "Refusal", "StreamSlots", "body_refusal", "read_body"]

RETRY_AFTER_S = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """A request the proxy will not serve: the status, a one-line reason, maybe Retry-After."""

    status: int
    message: str
    retry_after: int | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"retry-after": str(self.retry_after)}


def _too_large(max_body: int) -> Refusal:
    return Refusal(status=413,
                   message=f"unbroken proxy: the request body is over --max-body ({max_body} "
                           "bytes)")


def body_refusal(content_length: str | None, max_body: int | None) -> Refusal | None:
    """A 413 when the declared ``Content-Length`` is over the limit (before reading a byte)."""
    if max_body is None or content_length is None:
        return None
    length = content_length.strip()
    if length.isascii() and length.isdigit() and int(length) > max_body:
        return _too_large(max_body)
    return None


async def read_body(chunks: AsyncIterator[bytes], max_body: int | None) -> bytes | Refusal:
    """The whole body, or a 413 as soon as more than ``max_body`` bytes arrived (a chunked
    body has no Content-Length to check first, so it is counted as it comes)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if max_body is not None and size > max_body:
            return _too_large(max_body)
        parts.append(chunk)
    return b"".join(parts)


class StreamSlots:
    """Live streams, counted in total and per credential hash."""

    def __init__(self, *, max_streams: int | None, max_streams_per_key: int | None) -> None:
        self.max_streams = max_streams
        self.max_streams_per_key = max_streams_per_key
        self.live = 0
        self._per_key: Counter[str] = Counter()

    def take(self, credential: str | None) -> Refusal | None:
        """Take a slot for a new stream, or say why not (429 for the key, 503 for the proxy)."""
        limit = self.max_streams_per_key
        if credential is not None and limit is not None and self._per_key[credential] >= limit:
            return Refusal(
                status=429, retry_after=RETRY_AFTER_S,
                message=f"unbroken proxy: this credential has {limit} live streams "
                        "(--max-streams-per-key)",
            )
        if self.max_streams is not None and self.live >= self.max_streams:
            return Refusal(
                status=503, retry_after=RETRY_AFTER_S,
                message=f"unbroken proxy: {self.max_streams} streams are live (--max-streams); "
                        "retry later",
            )
        self.live += 1
        if credential is not None:
            self._per_key[credential] += 1
        return None

    def give_back(self, credential: str | None) -> None:
        self.live -= 1
        if credential is not None:
            self._per_key[credential] -= 1
            if self._per_key[credential] <= 0:
                del self._per_key[credential]

    def of(self, credential: str | None) -> int:
        """Live streams of one credential."""
        return 0 if credential is None else self._per_key[credential]


DRAINING = Refusal(status=503, retry_after=RETRY_AFTER_S,
                   message="unbroken proxy: shutting down; retry on another instance")
