"""Pass-through, upstream errors, cancel, disconnect policies, retention, and recovery."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    FrameReader,
    create_and_purge,
    frames_of,
    free_port,
    mock_counts,
    proxy_config,
    read_some,
    running_proxy,
    stream_status,
)
from tests.servers import serve_in_thread

import unbroken
from unbroken.finish import Status
from unbroken.mock import reply_text
from unbroken.proxy import create_app
from unbroken.streams.journal import (
    FrameRecord,
    MemoryJournal,
    SQLiteJournal,
    StreamMeta,
    StreamState,
)

pytestmark = pytest.mark.integration

AUTH = {"authorization": f"Bearer {KEY}"}


def ended_status(proxy: str, stream_id: str) -> dict[str, Any]:
    """Poll the status (a reader on the events endpoint would count as attached) until the
    stream ends; bounded (30 s, for a slow machine)."""
    deadline = time.monotonic() + 30
    while True:
        status = stream_status(proxy, stream_id)
        if status["status"] not in ("pending", "streaming") or time.monotonic() > deadline:
            return status
        time.sleep(0.02)


def test_healthz_and_pass_through_of_non_streaming_requests(mock_server: str) -> None:
    with running_proxy(mock_server) as (proxy, _app):
        health = httpx2.get(proxy + "/healthz")
        assert (health.status_code, health.json()["status"]) == (200, "ok")
        for path, body in (
            ("/v1/chat/completions", {"model": "m", "messages": []}),
            ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": []}),
            ("/v1beta/models/g:generateContent", {"contents": []}),
            ("/api/chat", {"model": "m", "messages": [], "stream": False}),
        ):
            headers = AUTH | {"Unbroken-Mock": "seed=2; tokens=4"}
            direct = httpx2.post(mock_server + path, json=body, headers=headers)
            proxied = httpx2.post(proxy + path, json=body, headers=headers)
            assert proxied.status_code == direct.status_code == 200
            assert proxied.content == direct.content
            assert "unbroken-stream-id" not in proxied.headers
        unknown = httpx2.get(proxy + "/v1/nothing-here")
        assert unknown.status_code == 404  # the mock's answer, relayed
    assert mock_counts(mock_server)["generations"] == {
        "/v1/chat/completions": 2, "/v1/messages": 2,
        "/v1beta/models/g:generateContent": 2, "/api/chat": 2,
    }


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic"])
def test_upstream_error_status_is_relayed_and_no_stream_is_made(mock_server: str,
                                                               dialect: str) -> None:
    call = CALLS[dialect]
    with running_proxy(mock_server) as (proxy, app):
        response = httpx2.post(proxy + call.path, json=call.body,
                               headers=call.headers("status=429; retry_after=3"))
        assert response.status_code == 429
        assert response.headers["retry-after"] == "3"
        assert "unbroken-stream-id" not in response.headers
        assert "mock status 429" in response.text
        assert app.producers == {}


def test_unreachable_upstream_is_502_in_the_dialect(mock_server: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with running_proxy(dead) as (proxy, _app):
        call = CALLS["anthropic"]
        response = httpx2.post(proxy + call.path, json=call.body, headers=call.headers(""))
        assert response.status_code == 502
        assert response.json()["type"] == "error"
        assert "unreachable" in response.json()["error"]["message"]


def test_cancel_a_stalled_stream(mock_server: str) -> None:
    call = CALLS["openai-chat"]
    scenario = "seed=5; tokens=10; stall_after=3; stall_s=30"
    with running_proxy(mock_server) as (proxy, app), httpx2.Client(timeout=10) as client:
        with client.stream("POST", proxy + call.path, json=call.body,
                           headers=call.headers(scenario)) as response:
            stream_id = response.headers["unbroken-stream-id"]
            reader = FrameReader(response, "openai-chat")
            head = reader.take(3)
            cancelled = client.post(f"{proxy}/v1/streams/{stream_id}/cancel", headers=AUTH)
            assert cancelled.status_code == 200
            assert cancelled.json()["status"] == "cancelled"
            tail = reader.rest()
        assert [frame.id for frame in head + tail] == [f"{stream_id}:{n}" for n in range(1, 5)]
        assert '"code":"stream_cancelled"' in tail[-1].data
        status = stream_status(proxy, stream_id)
        assert (status["status"], status["last_seq"]) == ("cancelled", 4)
        assert status["text"] == call.text_after(5, 10, 3)
        assert app.producers == {}


@pytest.mark.parametrize("policy", ["keep", "cancel"])
def test_client_disconnect_keeps_or_cancels_the_generation(mock_server: str,
                                                           policy: str) -> None:
    call = CALLS["anthropic"]
    scenario = "seed=8; tokens=30; delay_ms=20"
    if policy == "cancel":  # the 0.6 s generation must not end before the cancel, however slow
        scenario += "; stall_after=10; stall_s=30"
    with running_proxy(mock_server, on_disconnect=policy) as (proxy, _app):
        with httpx2.stream("POST", proxy + call.path, json=call.body,
                           headers=call.headers(scenario), timeout=10) as response:
            stream_id = response.headers["unbroken-stream-id"]
            read_some(response, "anthropic", 5)
        status = ended_status(proxy, stream_id)
    if policy == "keep":
        assert (status["status"], status["text"]) == ("completed", reply_text(8, 30))
        assert status["last_seq"] == call.total(30)
    else:
        assert status["status"] == "cancelled"
        assert 5 <= status["last_seq"] < call.total(30)
        assert reply_text(8, 30).startswith(status["text"])
    assert mock_counts(mock_server)["generations"] == {call.path: 1}


def test_cancel_after_bounds_an_unread_generation(mock_server: str) -> None:
    call = CALLS["ollama"]
    scenario = "seed=8; tokens=30; stall_after=2; stall_s=30"
    with running_proxy(mock_server, cancel_after=0.2) as (proxy, _app):
        with httpx2.stream("POST", proxy + call.path, json=call.body,
                           headers=call.headers(scenario), timeout=10) as response:
            stream_id = response.headers["unbroken-stream-id"]
            read_some(response, "ollama", 2)
        # Nobody reads for 0.2 s: the generation is cancelled.
        status = ended_status(proxy, stream_id)
    assert (status["status"], status["last_seq"]) == ("cancelled", 3)
    assert status["text"] == call.text_after(8, 30, 2)


def test_retention_expires_streams(mock_server: str) -> None:
    call = CALLS["openai-chat"]
    # 2 s of retention: the status read right after the stream ended must find it on a slow
    # machine too; then it expires, which the test waits for (bounded) instead of sleeping.
    with running_proxy(mock_server, retention=2.0, expire_every=0.1) as (proxy, app):
        created = httpx2.post(proxy + call.path, json=call.body, headers=call.headers("tokens=2"))
        stream_id = created.headers["unbroken-stream-id"]
        assert stream_status(proxy, stream_id)["status"] == "completed"
        deadline = time.monotonic() + 30
        while httpx2.get(f"{proxy}/v1/streams/{stream_id}", headers=AUTH).status_code != 404:
            assert time.monotonic() < deadline, "the stream never expired"
            time.sleep(0.05)
        gone = httpx2.get(f"{proxy}/v1/streams/{stream_id}/events", headers=AUTH)
        assert gone.status_code == 404
        # The purge runs every 0.1 s: the record itself goes too.
        deadline = time.monotonic() + 10
        while asyncio.run(app.journal.get(stream_id)) is not None:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_event_source_gets_204_for_an_expired_stream(mock_server: str) -> None:
    call = CALLS["openai-chat"]
    # Expired but not yet purged (purging runs only every hour here).
    with running_proxy(mock_server, retention=0.3, expire_every=3600) as (proxy, _app):
        created = httpx2.post(proxy + call.path, json=call.body, headers=call.headers("tokens=2"))
        stream_id = created.headers["unbroken-stream-id"]
        token = created.headers["unbroken-stream-token"]
        time.sleep(0.5)
        url = f"{proxy}/v1/streams/{stream_id}/events?token={token}"
        assert httpx2.get(url, headers={"accept": "text/event-stream"}).status_code == 204
        assert httpx2.get(url).status_code == 404


def test_streams_left_unfinished_are_marked_interrupted_on_start(tmp_path: Path,
                                                                mock_server: str) -> None:
    store = tmp_path / "crashed.db"
    asyncio.run(_leave_unfinished(store))
    with running_proxy(mock_server, store=f"sqlite:///{store}") as (proxy, _app):
        status = stream_status(proxy, "ub_" + "a" * 24)
        assert (status["status"], status["last_seq"], status["text"]) == ("interrupted", 3, "ab")
        assert status["error"]["type"] == "proxy_restarted"
        events = httpx2.get(f"{proxy}/v1/streams/{'ub_' + 'a' * 24}/events?after=2",
                            headers=AUTH)
        [last] = frames_of("anthropic", events.content)
        assert (last.event, last.id) == ("error", f"ub_{'a' * 24}:3")


async def _leave_unfinished(store: Path) -> None:
    from unbroken.streams.access import secret_hash

    journal = SQLiteJournal(str(store))
    await journal.open()
    meta = StreamMeta(stream_id="ub_" + "a" * 24, dialect="anthropic", created=time.time(),
                      media_type="text/event-stream", token_hash=secret_hash("t"),
                      credential_hash=secret_hash(KEY))
    await journal.create(meta, StreamState(status=Status.PENDING, updated=time.time()))
    frames = [FrameRecord(1, "ping", b"{}"), FrameRecord(2, "delta", b"{}", "ab")]
    await journal.append(meta.stream_id, frames,
                         StreamState(status=Status.STREAMING, updated=time.time(), last_seq=2))
    await journal.close()


def test_pass_through_streams_request_bodies_and_keeps_their_framing() -> None:
    async def echo(request: Request) -> JSONResponse:
        body = await request.body()
        return JSONResponse({
            "method": request.method,
            "length": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
            "content_length": request.headers.get("content-length"),
            "transfer_encoding": request.headers.get("transfer-encoding"),
            "authorization": request.headers.get("authorization"),
            "query": request.url.query,
        }, headers={"x-upstream": "echo"})

    upstream = Starlette(routes=[Route("/{path:path}", echo, methods=["GET", "POST", "PUT"])])
    upload = bytes(range(256)) * 4096  # 1 MiB
    with serve_in_thread(upstream) as origin, running_proxy(origin) as (proxy, _app):
        sent = httpx2.post(proxy + "/v1/files?purpose=batch", content=upload, headers=AUTH)
        assert sent.status_code == 200
        assert sent.headers["x-upstream"] == "echo"
        assert sent.json() == {
            "method": "POST", "length": len(upload),
            "sha256": hashlib.sha256(upload).hexdigest(),
            "content_length": str(len(upload)), "transfer_encoding": None,
            "authorization": AUTH["authorization"], "query": "purpose=batch",
        }
        fetched = httpx2.get(proxy + "/v1/models", headers=AUTH)
        assert fetched.json()["method"] == "GET"
        assert (fetched.json()["length"], fetched.json()["content_length"],
                fetched.json()["transfer_encoding"]) == (0, None, None)


class FailingJournal(MemoryJournal):
    """A journal whose storage fails from the fourth append on (a full disk, say)."""

    def __init__(self) -> None:
        super().__init__()
        self.appends = 0

    def _store(self, stream_id: str, frames: Sequence[FrameRecord],
               state: StreamState) -> asyncio.Future[None]:
        self.appends += 1
        if self.appends < 4:
            return super()._store(stream_id, frames, state)
        failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        failed.set_exception(OSError("disk full"))
        return failed


def test_a_failing_journal_ends_readers_instead_of_hanging(mock_server: str) -> None:
    call = CALLS["openai-chat"]
    journal = FailingJournal()
    app = create_app(proxy_config(mock_server), journal=journal)
    with serve_in_thread(app) as proxy:
        # One frame per upstream read (delay_ms), so the first appends hold a frame each.
        response = httpx2.post(proxy + call.path, json=call.body, timeout=10,
                               headers=call.headers("seed=1; tokens=10; delay_ms=20"))
        frames = frames_of("openai-chat", response.content)
        stream_id = response.headers["unbroken-stream-id"]
        # The three journaled frames, then, since the stream never ended, the dialect's error
        # frame (no id: it is not journaled), so an SDK raises instead of ending quietly.
        assert [frame.id for frame in frames] == [f"{stream_id}:{n}" for n in (1, 2, 3)] + [
            f"{stream_id}:3"]  # an event without id: keeps the last event id
        error = json.loads(frames[-1].data)["error"]
        assert (error["code"], error["type"]) == ("stream_incomplete", "server_error")
        assert error["message"] == (
            f"unbroken proxy: this response ended before stream {stream_id} did (after seq 3); "
            f"reconnect with Last-Event-ID to read on, or see GET /v1/streams/{stream_id}")
        assert b"id:" not in response.content.split(b"\n\n")[-2]
        assert journal.tail(stream_id) is None
        # The official SDK raises on it.
        client = openai.OpenAI(base_url=proxy + "/v1", api_key="sk-test", max_retries=0)
        with pytest.raises(openai.APIError, match="this response ended before stream"):
            for _chunk in client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
                extra_headers={"unbroken-mock": "seed=1; tokens=10; delay_ms=20"},
            ):
                pass
        deadline = time.monotonic() + 10  # the producer task ends just after its readers
        while app.state.proxy.producers:
            assert time.monotonic() < deadline
            time.sleep(0.01)


@pytest.mark.parametrize("dialect", ["openai-chat", "gemini"])
def test_unbroken_reads_a_failing_journals_notice_as_a_cut(mock_server: str, dialect: str) -> None:
    call = CALLS[dialect]
    app = create_app(proxy_config(mock_server), journal=FailingJournal())
    with serve_in_thread(app) as proxy:
        # unbroken's own client takes the unnumbered error frame for what it is, the end of
        # this response and not of the stream: the three frames stay, interrupted (not
        # failed), and its resume meets the broken journal's 503 (then its 3 retries, no
        # time budget). A Gemini POST carries no ids at all: there the notice's ErrorInfo
        # says whose it is.
        with pytest.raises(unbroken.Interrupted), unbroken.stream(
            "POST", proxy + call.path, json=call.body, dialect=dialect,
            headers=call.headers("seed=1; tokens=10; delay_ms=20"),
            retry=unbroken.Retry(budget=None),
        ) as stream:
            for _event in stream:
                pass
    message = stream.message
    assert (message.seq_source, message.status, message.last_seq, message.text) == (
        "position" if dialect == "gemini" else "proxy", Status.INTERRUPTED, 3,
        call.text_after(1, 10, 3))
    assert [warning.code for warning in message.warnings][:2] == [
        "proxy_notice", "no_finish_reason"]
    assert stream.connections == 4


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic"])
def test_a_resume_that_fails_on_the_journal_is_503_in_its_dialect(
    mock_server: str, dialect: str
) -> None:
    call = CALLS[dialect]
    journal = FailingJournal()
    app = create_app(proxy_config(mock_server), journal=journal)
    with serve_in_thread(app) as proxy:
        first = httpx2.post(proxy + call.path, json=call.body, timeout=10,
                            headers=call.headers("seed=1; tokens=10; delay_ms=20"))
        stream_id = first.headers["unbroken-stream-id"]
        # The stream never ended and its producer is gone: the resume would mark it
        # interrupted, and that append fails too.
        resumed = httpx2.post(proxy + call.path, json=call.body, timeout=10,
                              headers=call.headers("") | {"Last-Event-ID": f"{stream_id}:1"})
    assert (resumed.status_code, resumed.headers["retry-after"]) == (503, "1")
    message = "unbroken proxy: the journal is unavailable (OSError); retry"
    assert resumed.json() == (
        {"type": "error", "error": {"type": "api_error", "message": message}}
        if dialect == "anthropic" else
        {"error": {"message": message, "type": "server_error", "param": None, "code": None}})


def test_an_upstream_that_compresses_anyway_is_decoded() -> None:
    chunk = (b'data: {"choices":[{"index":0,"delta":{"content":"h\\u00e9"},'
             b'"finish_reason":null}]}\n\n')
    done = (b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
            b"data: [DONE]\n\n")

    async def gzipped(request: Request) -> Response:
        assert request.headers["accept-encoding"] == "identity"
        return Response(gzip.compress(chunk * 3 + done), media_type="text/event-stream",
                        headers={"content-encoding": "gzip"})

    upstream = Starlette(routes=[Route("/v1/chat/completions", gzipped, methods=["POST"])])
    call = CALLS["openai-chat"]
    with serve_in_thread(upstream) as origin, running_proxy(origin) as (proxy, _app):
        response = httpx2.post(proxy + call.path, json=call.body, headers=AUTH)
        assert "content-encoding" not in response.headers
        frames = frames_of("openai-chat", response.content)
        assert [frame.data for frame in frames][-1] == "[DONE]"
        status = stream_status(proxy, response.headers["unbroken-stream-id"])
        assert (status["status"], status["text"], status["last_seq"]) == ("completed", "hé" * 3, 5)


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_event_source_gets_204_for_a_purged_stream(
    tmp_path: Path, mock_server: str, store: str
) -> None:
    call = CALLS["openai-chat"]
    url_store = "memory://" if store == "memory" else f"sqlite:///{tmp_path / 'j.db'}"
    # A purged stream's tombstone lives one more retention, then goes at the next purge: 2 s
    # (not 0.3 s) so that all the reads below surely come while it is there.
    with running_proxy(mock_server, retention=2.0, expire_every=0.1, store=url_store) as (
        proxy,
        app,
    ):
        stream_id, token = create_and_purge(proxy, app, call)
        events = f"{proxy}/v1/streams/{stream_id}/events"
        source = {"accept": "text/event-stream"}
        # The owner's EventSource (token or credential) is told to stop; anyone else: 404.
        assert httpx2.get(f"{events}?token={token}", headers=source).status_code == 204
        assert httpx2.get(events, headers={**source, **AUTH}).status_code == 204
        assert httpx2.get(f"{events}?token=wrong", headers=source).status_code == 404
        assert httpx2.get(f"{events}?token={token}").status_code == 404  # not an EventSource
        unknown = f"{proxy}/v1/streams/ub_{'0' * 24}/events?token={token}"
        assert httpx2.get(unknown, headers=source).status_code == 404
