"""Which provider a request is for, whether it streams, and which headers cross the proxy."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..dialects import DIALECTS, PROVIDERS, AsksStream, Provider, dialect_class
from ..dialects.base import DialectBase
from ..resumption import STREAM_ID_HEADER, STREAM_TOKEN_HEADER

__all__ = [
    "Endpoint",
    "endpoint_for",
    "request_headers",
    "response_headers",
    "wants_stream",
]

# RFC 9110 section 7.6.1: meaningful for one connection only, never forwarded.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade",
})
_FALLBACK = next(provider for provider in PROVIDERS if provider.fallback)


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """``provider`` names the origin; ``dialect`` is set for the paths that stream."""

    provider: str
    dialect: str | None = None

    @property
    def spec(self) -> type[DialectBase]:
        """The dialect's class (its framing, routes ...); only for an endpoint that streams."""
        assert self.dialect is not None
        return dialect_class(self.dialect)

    def streams_as(self, content_type: str) -> bool:
        """True if an upstream answer with this content type is the stream we expect."""
        return self.spec.framing.accepts(content_type)


def endpoint_for(method: str, path: str, headers: Mapping[str, str]) -> Endpoint:
    """The endpoint of a request: a dialect's route first, then a provider's path prefix, then a
    header only its clients send; anything else goes to the fallback provider (OpenAI)."""
    provider: Provider | None = None
    for cls in DIALECTS:
        claimed = cls.route.claims(method, path)
        if claimed:
            return Endpoint(provider=cls.route.provider.name, dialect=cls.name)
        if claimed is not None and provider is None:
            provider = cls.route.provider
    if provider is None:
        provider = next((each for each in PROVIDERS if path.startswith(each.prefixes)), None)
    if provider is None:
        provider = next(
            (each for each in PROVIDERS if any(name in headers for name in each.headers)), None
        )
    return Endpoint(provider=(provider or _FALLBACK).name)


def wants_stream(endpoint: Endpoint, body: bytes, query: Mapping[str, str]) -> bool:
    """Whether this request asks for the stream the proxy journals (else it passes through)."""
    if endpoint.dialect is None:
        return False
    asks = endpoint.spec.route.asks
    if asks is AsksStream.ALWAYS:
        return True
    if asks is AsksStream.QUERY_ALT_SSE:
        return query.get("alt") == "sse"
    try:
        payload: Any = json.loads(body) if body else {}
    except ValueError:
        return False
    if not isinstance(payload, dict):
        return False
    if asks is AsksStream.BODY_UNLESS_FALSE:
        return payload.get("stream", True) is not False
    return payload.get("stream") is True


def _connection_listed(headers: Iterable[tuple[str, str]]) -> set[str]:
    listed: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            listed.update(token.strip().lower() for token in value.split(","))
    return listed


def request_headers(
    headers: Iterable[tuple[str, str]], *, identity: bool, drop: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """End-to-end request headers for the upstream.

    Hop-by-hop headers, ``Host`` (the upstream's own is set), ``Content-Length`` (recomputed)
    and the proxy's own ``Unbroken-Stream-*`` headers are dropped (a stream token is a secret
    for this proxy only; other ``Unbroken-*`` headers, such as the mock's scenario, pass).
    ``identity`` asks the upstream for an unencoded body, so that the proxy can parse frames.
    """
    pairs = list(headers)
    skip = set(HOP_BY_HOP) | _connection_listed(pairs) | set(drop)
    skip |= {"host", "content-length", STREAM_TOKEN_HEADER.lower(), STREAM_ID_HEADER.lower()}
    if identity:
        skip.add("accept-encoding")
    out = [
        (name, value)
        for name, value in pairs
        if name.lower() not in skip
    ]
    if identity:
        out.append(("accept-encoding", "identity"))
    return out


def response_headers(
    headers: Iterable[tuple[str, str]], *, reencoded: bool
) -> list[tuple[str, str]]:
    """End-to-end response headers for the client.

    The server's own ``Date``/``Server`` are dropped (uvicorn writes its own); for a body the
    proxy re-encodes, so are ``Content-Length``, ``Content-Encoding`` and ``Content-MD5``.
    """
    pairs = list(headers)
    skip = HOP_BY_HOP | _connection_listed(pairs) | {"date", "server"}
    if reencoded:
        skip |= {"content-length", "content-encoding", "content-md5", "etag"}
    return [(name, value) for name, value in pairs if name.lower() not in skip]
