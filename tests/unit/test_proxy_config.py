"""ProxyConfig, durations, the command line, and which provider a request is for."""

from __future__ import annotations

import pytest

from unbroken.proxy import ProxyConfig, parse_duration
from unbroken.proxy.__main__ import build_parser, config_from_args
from unbroken.proxy.routing import (
    Endpoint,
    endpoint_for,
    request_headers,
    response_headers,
    wants_stream,
)


def test_parse_duration() -> None:
    assert parse_duration("90") == 90.0
    assert parse_duration("1.5s") == 1.5
    assert parse_duration("15m") == 900.0
    assert parse_duration("24h") == 86400.0
    assert parse_duration("7d") == 604800.0
    for bad in ("", "h", "-1s", "5w", "1e3", "24 h"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration(bad)


def test_origins_are_normalized_and_checked() -> None:
    config = ProxyConfig(origins={"openai": "http://127.0.0.1:9000/"}, store="memory://")
    assert config.origin("openai") == "http://127.0.0.1:9000"
    assert config.origin("anthropic") == "https://api.anthropic.com"
    assert config.origin("ollama") == "http://127.0.0.1:11434"
    with pytest.raises(ValueError, match="no path"):
        ProxyConfig(origins={"openai": "http://h/v1"})
    with pytest.raises(ValueError, match="scheme://host"):
        ProxyConfig(origins={"gemini": "h:80"})
    with pytest.raises(ValueError, match="unknown provider 'azure'"):
        ProxyConfig(origins={"azure": "https://x.example"})
    with pytest.raises(ValueError, match="retention"):
        ProxyConfig(retention=0)


def test_idle_cancel_policy() -> None:
    assert ProxyConfig().idle_cancel_after is None
    assert ProxyConfig(on_disconnect="cancel").idle_cancel_after == 0.0
    assert ProxyConfig(on_disconnect="cancel", cancel_after=5).idle_cancel_after == 5
    assert ProxyConfig(cancel_after=30).idle_cancel_after == 30


def test_command_line_flags() -> None:
    args = build_parser().parse_args([
        "--host", "127.0.0.1", "--port", "8123", "--upstream", "http://127.0.0.1:9",
        "--anthropic", "http://127.0.0.1:10", "--store", "sqlite:///x.db",
        "--on-disconnect", "cancel", "--cancel-after", "2m", "--retention", "1h",
    ])
    config = config_from_args(args)
    assert (args.host, args.port) == ("127.0.0.1", 8123)
    assert tuple(map(config.origin, ("openai", "anthropic", "gemini", "ollama"))) == (
        "http://127.0.0.1:9", "http://127.0.0.1:10", "http://127.0.0.1:9", "http://127.0.0.1:9"
    )
    assert (config.store, config.on_disconnect, config.cancel_after, config.retention) == (
        "sqlite:///x.db", "cancel", 120.0, 3600.0
    )
    defaults = config_from_args(build_parser().parse_args([]))
    assert defaults.store == "sqlite:///unbroken.db"
    assert defaults.origin("openai") == "https://api.openai.com"


def test_endpoints() -> None:
    assert endpoint_for("POST", "/v1/chat/completions", {}) == Endpoint(
        provider="openai", dialect="openai-chat")
    assert endpoint_for("POST", "/v1/responses", {}).dialect == "openai-responses"
    assert endpoint_for("POST", "/v1/messages", {}) == Endpoint(
        provider="anthropic", dialect="anthropic")
    assert endpoint_for("POST", "/v1beta/models/gemini-x:streamGenerateContent", {}) == (
        Endpoint(provider="gemini", dialect="gemini"))
    assert endpoint_for("POST", "/v1beta/models/gemini-x:generateContent", {}) == Endpoint(
        provider="gemini")
    assert endpoint_for("POST", "/v1/models/gemini-x:streamGenerateContent", {}) == (
        Endpoint(provider="gemini", dialect="gemini"))
    assert endpoint_for("GET", "/v1/models/gpt-x", {}) == Endpoint(provider="openai")
    assert endpoint_for("GET", "/v1/models", {"x-goog-api-key": "k"}) == Endpoint(
        provider="gemini")
    assert endpoint_for("POST", "/api/chat", {}) == Endpoint(provider="ollama", dialect="ollama")
    assert endpoint_for("GET", "/api/tags", {}) == Endpoint(provider="ollama")
    assert endpoint_for("GET", "/v1/responses/resp_1", {}) == Endpoint(provider="openai")
    assert endpoint_for("GET", "/v1/models", {"anthropic-version": "2023-06-01"}) == Endpoint(
        provider="anthropic")
    assert endpoint_for("POST", "/v1/messages/count_tokens", {}) == Endpoint(
        provider="anthropic")


def test_wants_stream() -> None:
    chat = Endpoint(provider="openai", dialect="openai-chat")
    assert wants_stream(chat, b'{"stream": true}', {})
    assert not wants_stream(chat, b'{"stream": false}', {})
    assert not wants_stream(chat, b"{}", {})
    assert not wants_stream(chat, b"not json", {})
    assert not wants_stream(chat, b"[1]", {})
    ollama = Endpoint(provider="ollama", dialect="ollama")
    assert wants_stream(ollama, b"{}", {})
    assert not wants_stream(ollama, b'{"stream": false}', {})
    gemini = Endpoint(provider="gemini", dialect="gemini")
    assert wants_stream(gemini, b"{}", {"alt": "sse"})
    assert not wants_stream(gemini, b"{}", {})
    assert not wants_stream(Endpoint(provider="openai"), b'{"stream": true}', {})


def test_streams_as() -> None:
    assert Endpoint(provider="openai", dialect="openai-chat").streams_as(
        "text/event-stream; charset=utf-8")
    assert not Endpoint(provider="openai", dialect="openai-chat").streams_as("application/json")
    assert Endpoint(provider="ollama", dialect="ollama").streams_as("application/x-ndjson")


def test_request_headers_drop_hop_by_hop_and_ask_for_identity() -> None:
    incoming = [
        ("host", "proxy:8000"), ("connection", "keep-alive, x-private"), ("x-private", "1"),
        ("keep-alive", "timeout=5"), ("transfer-encoding", "chunked"), ("te", "trailers"),
        ("content-length", "17"), ("accept-encoding", "gzip, br"),
        ("authorization", "Bearer sk"), ("anthropic-version", "2023-06-01"),
        ("unbroken-stream-token", "tok"), ("unbroken-mock", "tokens=3"),
        ("content-type", "application/json"),
    ]
    assert request_headers(incoming, identity=True) == [
        ("authorization", "Bearer sk"), ("anthropic-version", "2023-06-01"),
        ("unbroken-mock", "tokens=3"), ("content-type", "application/json"),
        ("accept-encoding", "identity"),
    ]
    passed = request_headers(incoming, identity=False)
    assert ("accept-encoding", "gzip, br") in passed


def test_response_headers_drop_hop_by_hop_and_encoding_when_reencoded() -> None:
    upstream = [
        ("date", "x"), ("server", "y"), ("content-type", "text/event-stream"),
        ("content-length", "10"), ("content-encoding", "gzip"), ("transfer-encoding", "chunked"),
        ("x-request-id", "req_1"), ("set-cookie", "a=b"),
    ]
    assert response_headers(upstream, reencoded=True) == [
        ("content-type", "text/event-stream"), ("x-request-id", "req_1"), ("set-cookie", "a=b"),
    ]
    assert response_headers(upstream, reencoded=False) == [
        ("content-type", "text/event-stream"), ("content-length", "10"),
        ("content-encoding", "gzip"), ("x-request-id", "req_1"), ("set-cookie", "a=b"),
    ]
