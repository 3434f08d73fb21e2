"""Both of Ollama's generation endpoints are journaled streams; its other paths pass through."""

from __future__ import annotations

import pytest

from unbroken.proxy.routing import Endpoint, endpoint_for, wants_stream

OLLAMA_STREAM = Endpoint(provider="ollama", dialect="ollama")


@pytest.mark.parametrize("path", ["/api/chat", "/api/generate"])
def test_ollama_generation_endpoints_stream_unless_told_not_to(path: str) -> None:
    endpoint = endpoint_for("POST", path, {})
    assert endpoint == OLLAMA_STREAM
    framing = endpoint.spec.framing.name
    assert (framing, endpoint.streams_as("application/x-ndjson")) == ("ndjson", True)
    assert wants_stream(endpoint, b'{"model": "m", "prompt": "hi"}', {}) is True
    assert wants_stream(endpoint, b"", {}) is True
    assert wants_stream(endpoint, b'{"model": "m", "stream": true}', {}) is True
    assert wants_stream(endpoint, b'{"model": "m", "stream": false}', {}) is False
    assert wants_stream(endpoint, b"not json", {}) is False


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/api/generate"), ("POST", "/api/embed"), ("POST", "/api/pull"),
    ("GET", "/api/tags"), ("POST", "/api/generate/"),
])
def test_other_ollama_requests_pass_through(method: str, path: str) -> None:
    assert endpoint_for(method, path, {}) == Endpoint(provider="ollama")
