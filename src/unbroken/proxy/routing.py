"""Which provider a request is for, whether it streams, and which headers cross the proxy."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..resumption import STREAM_ID_HEADER, STREAM_TOKEN_HEADER

__all__ = [
    "OLLAMA_STREAM_PATHS",
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
# Gemini's methods: /v1beta/models/gemini-x:streamGenerateContent (google-genai 3 uses /v1/).
_GEMINI_METHOD = re.compile(r"/(?:v1|v1beta|v1alpha)/(?:tunedModels|models)/[^/]+:([A-Za-z]+)")
# Ollama's two generation endpoints stream the same NDJSON lines (text in ``message.content`` or
# in ``response``); the ``ollama`` dialect reads both.
OLLAMA_STREAM_PATHS = frozenset({"/api/chat", "/api/generate"})
_MEDIA_TYPES = {"ndjson": ("application/x-ndjson", "application/json"),
                "sse": ("text/event-stream",)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """``provider`` names the origin; ``dialect`` is set for the paths that stream."""

    provider: str
    dialect: str | None = None

    @property
    def framing(self) -> str:
        return "ndjson" if self.dialect == "ollama" else "sse"

    def streams_as(self, content_type: str) -> bool:
        """True if an upstream answer with this content type is the stream we expect."""
        media = content_type.partition(";")[0].strip().lower()
        return media in _MEDIA_TYPES[self.framing]


def endpoint_for(method: str, path: str, headers: Mapping[str, str]) -> Endpoint:
    """The endpoint of a request; unknown paths go to a provider by their prefix."""
    if method == "POST":
        if path == "/v1/chat/completions":
            return Endpoint(provider="openai", dialect="openai-chat")
        if path == "/v1/responses":
            return Endpoint(provider="openai", dialect="openai-responses")
        if path == "/v1/messages":
            return Endpoint(provider="anthropic", dialect="anthropic")
        if path in OLLAMA_STREAM_PATHS:
            return Endpoint(provider="ollama", dialect="ollama")
    gemini = _GEMINI_METHOD.fullmatch(path)
    if gemini is not None:
        streams = method == "POST" and gemini.group(1) == "streamGenerateContent"
        return Endpoint(provider="gemini", dialect="gemini" if streams else None)
    if path.startswith(("/v1beta/", "/v1alpha/", "/upload/")) or "x-goog-api-key" in headers:
        return Endpoint(provider="gemini")
    if path.startswith("/api/"):
        return Endpoint(provider="ollama")
    if path.startswith("/v1/messages") or "anthropic-version" in headers:
        return Endpoint(provider="anthropic")
    return Endpoint(provider="openai")


def wants_stream(endpoint: Endpoint, body: bytes, query: Mapping[str, str]) -> bool:
    """Whether this request asks for the stream the proxy journals (else it passes through)."""
    if endpoint.dialect is None:
        return False
    if endpoint.dialect == "gemini":
        return query.get("alt") == "sse"
    try:
        payload: Any = json.loads(body) if body else {}
    except ValueError:
        return False
    if not isinstance(payload, dict):
        return False
    if endpoint.dialect == "ollama":
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
