"""CORS: ``ProxyConfig.cors_origins`` / ``--cors-origin`` and the headers a browser relies on.

The server tests run the proxy and the mock under real uvicorn (``@pytest.mark.integration``);
the browser itself is in ``tests/integration/test_browser_eventsource.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    create_and_purge,
    mock_counts,
    running_proxy,
)
from tests.servers import serve_in_thread

from unbroken.mock import create_app as create_mock
from unbroken.proxy import ProxyApp, ProxyConfig
from unbroken.proxy.__main__ import build_parser, config_from_args
from unbroken.proxy.config import cors_origin

APP = "http://localhost:3000"
OTHER_APP = "http://127.0.0.1:3000"  # another origin: the host differs
CHAT = CALLS["openai-chat"]
EXPOSED = "Unbroken-Stream-Id, Unbroken-Stream-Token"


@pytest.fixture(scope="module")
def mock() -> Iterator[str]:
    with serve_in_thread(create_mock()) as base_url:
        yield base_url


def cors_headers(response: httpx2.Response) -> dict[str, str]:
    return {name: value for name, value in response.headers.items()
            if name.startswith("access-control-")}


def preflight(url: str, origin: str, method: str, headers: str) -> httpx2.Response:
    return httpx2.options(url, headers={
        "origin": origin,
        "access-control-request-method": method,
        "access-control-request-headers": headers,
    }, timeout=10)


# -- configuration ----------------------------------------------------------------------------


def test_cors_origins_are_checked() -> None:
    assert ProxyConfig().cors_origins == ()
    listed = ["http://localhost:3000", "https://app.example.com"]  # a list becomes a tuple
    config = ProxyConfig(cors_origins=listed)  # type: ignore[arg-type]
    assert config.cors_origins == ("http://localhost:3000", "https://app.example.com")
    assert ProxyConfig(cors_origins=("*",)).cors_origins == ("*",)
    assert cors_origin("http://[::1]:8080") == "http://[::1]:8080"
    for bad in ("localhost:3000", "http://app/v1", "http://app?x=1", "http://app#top", "",
                "null", "http://*.example.com", "http://user@app", "http://app:99999", "/app"):
        with pytest.raises(ValueError, match=r"^cors_origins: a CORS origin is \* or "):
            ProxyConfig(cors_origins=(bad,))
    # Forms a browser never sends in Origin would silently never match: refused, with the fix.
    for bad, fixed in (("http://localhost:3000/", "http://localhost:3000"),
                       ("HTTPS://App.Example.com", "https://app.example.com"),
                       ("https://app.example.com:443", "https://app.example.com")):
        with pytest.raises(ValueError, match=f"browsers send '{fixed}'$"):
            ProxyConfig(cors_origins=(bad,))
    with pytest.raises(ValueError, match="cors_origins is a tuple of origins, not 'http://a'"):
        ProxyConfig(cors_origins="http://a")  # type: ignore[arg-type]


def test_cors_origin_flag() -> None:
    assert config_from_args(build_parser().parse_args([])).cors_origins == ()
    args = build_parser().parse_args(
        ["--cors-origin", "http://localhost:3000", "--cors-origin", "https://app.example.com"])
    assert config_from_args(args).cors_origins == (
        "http://localhost:3000", "https://app.example.com")


@pytest.mark.parametrize(("bad", "says"), [
    ("http://localhost:3000/", "browsers send 'http://localhost:3000'"),
    ("localhost:3000", "not 'localhost:3000'"),
    ("https://app.example.com/chat", "with no path"),
])
def test_cors_origin_flag_refuses_bad_origins(
    bad: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--cors-origin", bad])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "argument --cors-origin: a CORS origin is * or scheme://host[:port]" in error
    assert says in error


# -- the server -------------------------------------------------------------------------------


@pytest.mark.integration
def test_preflights_are_answered_by_the_proxy_not_upstream(mock: str) -> None:
    httpx2.post(mock + "/_mock/reset", timeout=5)
    with running_proxy(mock, cors_origins=(APP,)) as (proxy, _app):
        asked = "authorization, content-type, idempotency-key, unbroken-mock, x-stainless-os"
        allowed = preflight(proxy + CHAT.path, APP, "POST", asked)
        assert (allowed.status_code, allowed.text) == (200, "OK")
        assert cors_headers(allowed) == {
            "access-control-allow-origin": APP,
            "access-control-allow-methods": "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS",
            "access-control-allow-headers": asked,  # mirrored
            "access-control-max-age": "600",
        }
        # What an EventSource's reconnect asks for, on the events endpoint.
        source = preflight(f"{proxy}/v1/streams/ub_{'0' * 24}/events", APP, "GET",
                           "last-event-id")
        assert source.status_code == 200
        assert source.headers["access-control-allow-origin"] == APP
        assert source.headers["access-control-allow-headers"] == "last-event-id"
        # Another origin, or a method not allowed: refused, and never with an allow-origin.
        refused = preflight(proxy + CHAT.path, OTHER_APP, "POST", "authorization")
        assert (refused.status_code, refused.text) == (400, "Disallowed CORS origin")
        assert "access-control-allow-origin" not in refused.headers
        # Every method the proxy passes through may be called (DELETE a stored response)...
        delete = preflight(proxy + "/v1/responses/resp_1", APP, "DELETE", "authorization")
        assert (delete.status_code, delete.headers["access-control-allow-origin"]) == (200, APP)
        # ... and no other.
        trace = preflight(proxy + "/v1/files", APP, "TRACE", "authorization")
        assert (trace.status_code, trace.text) == (400, "Disallowed CORS method")
    assert mock_counts(mock) == {"generations": {}, "resumes": {}}


@pytest.mark.integration
def test_no_request_of_any_method_reaches_upstream_for_a_preflight() -> None:
    # The mock counts generations only; this upstream counts every request it gets.
    seen: list[str] = []

    async def record(request: Request) -> Response:
        seen.append(f"{request.method} {request.url.path}")
        return Response(status_code=204)

    upstream = Starlette(routes=[Route("/{path:path}", record, methods=["OPTIONS", "POST"])])
    with serve_in_thread(upstream) as origin, running_proxy(origin, cors_origins=(APP,)) as (
        proxy, _app,
    ):
        for path in (CHAT.path, "/v1/models", "/v1/messages"):
            assert preflight(proxy + path, APP, "POST", "authorization").status_code == 200
            assert preflight(proxy + path, OTHER_APP, "POST", "authorization").status_code == 400
        assert seen == []
        # An OPTIONS that is not a preflight (no Access-Control-Request-Method) is forwarded.
        plain = httpx2.options(proxy + "/v1/models", headers={"origin": APP}, timeout=10)
        assert (plain.status_code, plain.headers["access-control-allow-origin"]) == (204, APP)
        assert seen == ["OPTIONS /v1/models"]


@pytest.mark.integration
def test_an_allowed_origin_reads_the_stream_headers_the_204_and_the_404(mock: str) -> None:
    with running_proxy(mock, cors_origins=(APP, "https://app.example.com")) as (proxy, _app):
        created = httpx2.post(proxy + CHAT.path, json=CHAT.body,
                              headers={**CHAT.headers("tokens=3"), "origin": APP}, timeout=10)
        assert created.status_code == 200
        assert created.headers["access-control-allow-origin"] == APP
        assert created.headers["access-control-expose-headers"] == EXPOSED
        assert "access-control-allow-credentials" not in created.headers
        assert "Origin" in created.headers["vary"]
        stream_id = created.headers["unbroken-stream-id"]
        token = created.headers["unbroken-stream-token"]
        events = f"{proxy}/v1/streams/{stream_id}/events?token={token}"
        source = {"origin": APP, "accept": "text/event-stream"}
        # The stream: openai-chat with 3 tokens is 6 frames.
        body = httpx2.get(events, headers=source, timeout=10)
        assert body.status_code == 200
        assert body.headers["access-control-allow-origin"] == APP
        assert body.text.count(f"id: {stream_id}:") == 6
        # The reconnect after the end: 204, which the browser may only see with CORS headers.
        stop = httpx2.get(events, headers={**source, "last-event-id": f"{stream_id}:6"})
        assert (stop.status_code, stop.headers["access-control-allow-origin"]) == (204, APP)
        gone = httpx2.get(f"{proxy}/v1/streams/ub_{'0' * 24}/events?token={token}",
                          headers=source)
        assert (gone.status_code, gone.headers["access-control-allow-origin"]) == (404, APP)


@pytest.mark.integration
def test_the_204_for_a_purged_stream_carries_cors_headers(mock: str) -> None:
    with running_proxy(mock, cors_origins=(APP,), retention=0.3, expire_every=0.1) as (
        proxy, app,
    ):
        stream_id, token = create_and_purge(proxy, app, CHAT)
        stop = httpx2.get(f"{proxy}/v1/streams/{stream_id}/events?token={token}",
                          headers={"origin": APP, "accept": "text/event-stream"})
        assert (stop.status_code, stop.headers["access-control-allow-origin"]) == (204, APP)


@pytest.mark.integration
def test_a_disallowed_origin_gets_no_allow_origin(mock: str) -> None:
    with running_proxy(mock, cors_origins=(APP,)) as (proxy, _app):
        created = httpx2.post(proxy + CHAT.path, json=CHAT.body,
                              headers={**CHAT.headers("tokens=2"), "origin": OTHER_APP})
        # The proxy still serves it (CORS is the browser's to enforce), but never says yes.
        assert created.status_code == 200
        assert "access-control-allow-origin" not in created.headers
        no_origin = httpx2.post(proxy + CHAT.path, json=CHAT.body,
                                headers=CHAT.headers("tokens=2"))
        assert "access-control-allow-origin" not in no_origin.headers


@pytest.mark.integration
def test_wildcard_origin(mock: str) -> None:
    with running_proxy(mock, cors_origins=("*",)) as (proxy, _app):
        allowed = preflight(proxy + CHAT.path, OTHER_APP, "POST", "authorization")
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "*"
        created = httpx2.post(proxy + CHAT.path, json=CHAT.body,
                              headers={**CHAT.headers("tokens=2"), "origin": OTHER_APP})
        assert created.headers["access-control-allow-origin"] == "*"
        assert created.headers["access-control-expose-headers"] == EXPOSED


@pytest.mark.integration
def test_no_cors_headers_by_default(mock: str) -> None:
    httpx2.post(mock + "/_mock/reset", timeout=5)
    with running_proxy(mock) as (proxy, _app):
        created = httpx2.post(proxy + CHAT.path, json=CHAT.body,
                              headers={**CHAT.headers("tokens=2"), "origin": APP})
        assert created.status_code == 200
        assert cors_headers(created) == {}
        stream_id = created.headers["unbroken-stream-id"]
        status = httpx2.get(f"{proxy}/v1/streams/{stream_id}",
                            headers={"authorization": f"Bearer {KEY}", "origin": APP})
        assert (status.status_code, cors_headers(status)) == (200, {})
        # Without CORS the proxy has no opinion on OPTIONS: it is forwarded like any request.
        forwarded = preflight(proxy + CHAT.path, APP, "POST", "authorization")
        assert cors_headers(forwarded) == {}
    assert mock_counts(mock)["generations"] == {"/v1/chat/completions": 1}


@pytest.mark.integration
def test_a_500_reaches_an_allowed_page_readable(
    mock: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # CORS sits outside Starlette's error handler: the page sees the 500, not a CORS failure.
    async def broken(self: ProxyApp, request: object) -> None:
        raise RuntimeError("a bug in a route")

    monkeypatch.setattr(ProxyApp, "stream_status", broken)
    with running_proxy(mock, cors_origins=(APP,)) as (proxy, _app):
        url = f"{proxy}/v1/streams/ub_{'0' * 24}"
        failed = httpx2.get(url, headers={"origin": APP}, timeout=10)
        assert (failed.status_code, failed.text) == (500, "Internal Server Error")
        assert failed.headers["access-control-allow-origin"] == APP
        other = httpx2.get(url, headers={"origin": OTHER_APP}, timeout=10)
        assert other.status_code == 500
        assert "access-control-allow-origin" not in other.headers
    assert "a bug in a route" in caplog.text  # still logged as the error it is
