"""``GET /v1/streams/{id}/events?format=unbroken`` through a real proxy in front of the mock, for
every dialect: the same end state, text and counts as the provider's own bytes read by
``unbroken``; resume by ``Last-Event-ID``; the live tail; the journal's ``interrupted`` for a
stream the upstream broke (not the ``failed`` its provider-shaped error frame would say)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from tests.integration.test_proxy_support import (
    CALLS,
    DIALECTS,
    KEY,
    message_of,
    mock_counts,
    running_proxy,
    stream_status,
)
from tests.normalized_reading import fold_normalized

from unbroken.finish import Status
from unbroken.mock import reply_text
from unbroken.normalized_sse import MEDIA_TYPE
from unbroken.streams.access import secret_hash
from unbroken.streams.app_stream import APP_DIALECT
from unbroken.streams.journal import StreamMeta, StreamState, journal_for

pytestmark = pytest.mark.integration

SCENARIOS = ("seed=4; tokens=9", "seed=4; tokens=9; finish=length",
             "seed=4; tokens=9; finish=content_filter", "seed=4; tokens=9; error_at=5",
             "seed=4; tokens=9; finish=tool_calls")


def create(proxy: str, dialect: str, scenario: str) -> str:
    call = CALLS[dialect]
    with httpx2.stream("POST", proxy + call.path, json=call.body, headers=call.headers(scenario),
                       timeout=10) as response:
        assert response.status_code == 200
        response.read()
        return response.headers["unbroken-stream-id"]


def events(proxy: str, stream_id: str, query: str = "format=unbroken",
           **headers: str) -> httpx2.Response:
    return httpx2.get(f"{proxy}/v1/streams/{stream_id}/events?{query}",
                      headers={"authorization": f"Bearer {KEY}", **headers}, timeout=10)


@pytest.mark.parametrize(("dialect", "scenario"), [
    pytest.param(dialect, scenario, id=f"{dialect}-{scenario.split('; ')[-1]}")
    for dialect in DIALECTS for scenario in SCENARIOS
    if not (dialect == "ollama" and "content_filter" in scenario)  # Ollama has no such finish
])
def test_the_same_end_as_the_providers_bytes(mock_server: str, dialect: str,
                                             scenario: str) -> None:
    with running_proxy(mock_server) as (proxy, _app):
        stream_id = create(proxy, dialect, scenario)
        provider = events(proxy, stream_id, query="")
        normalized = events(proxy, stream_id)
    assert normalized.status_code == 200
    assert normalized.headers["content-type"] == MEDIA_TYPE
    message = message_of(dialect, provider.content)
    got = fold_normalized(normalized.content, stream_id)
    reason = message.finish_reason
    assert got["end"] | {"error": None} == {
        "status": message.status.value, "finish_reason": None if reason is None else reason.value,
        "raw_finish_reason": message.raw_finish_reason, "error": None,
        "frames": message.last_seq,
        "chars": len(message.text)}
    assert (got["end"]["error"] is None) is (message.error is None)
    assert got["text"] == message.text
    assert got["statuses"] == ["streaming"]
    if "error_at" not in scenario and "tool_calls" not in scenario:
        assert got["text"] == reply_text(4, 9)


def test_accept_profile_resume_and_the_end_alone(mock_server: str) -> None:
    with running_proxy(mock_server) as (proxy, _app):
        stream_id = create(proxy, "anthropic", "seed=5; tokens=6")
        whole = fold_normalized(events(proxy, stream_id).content, stream_id)
        by_accept = events(proxy, stream_id, query="",
                           accept="text/event-stream; profile=unbroken")
        cut = whole["seqs"][2]
        resumed = events(proxy, stream_id, query="", accept="text/event-stream; profile=unbroken",
                         **{"last-event-id": f"{stream_id}:{cut}"})
        last = whole["end"]
        at_end = events(proxy, stream_id, **{"last-event-id": f"{stream_id}:{whole['seqs'][-1]}"})
        bad = events(proxy, stream_id, query="format=anthropic")
    assert fold_normalized(by_accept.content, stream_id) == whole
    rest = fold_normalized(resumed.content, stream_id)
    assert rest["seqs"] == whole["seqs"][3:]
    assert "".join([rest["text"]]) == reply_text(5, 6)[len(reply_text(5, 6)) - len(rest["text"]):]
    assert rest["end"] == last
    assert at_end.status_code == 200
    assert fold_normalized(at_end.content, stream_id)["seqs"] == []
    assert fold_normalized(at_end.content, stream_id)["end"] == last
    assert (bad.status_code, bad.json()["error"]["message"]) == (
        400, "unknown format 'anthropic'; valid: 'unbroken', 'provider'")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_broken_upstream_ends_interrupted_as_journaled(mock_server: str, dialect: str) -> None:
    with running_proxy(mock_server) as (proxy, _app):
        stream_id = create(proxy, dialect, "seed=6; tokens=8; drop_after=4")
        got = fold_normalized(events(proxy, stream_id).content, stream_id)
        status = stream_status(proxy, stream_id)
    assert status["status"] == "interrupted"
    assert got["end"]["status"] == "interrupted"
    assert got["end"]["finish_reason"] is None
    assert got["end"]["error"] == {"type": status["error"]["type"],
                                   "message": status["error"]["message"]}
    assert got["text"] == status["text"]
    assert got["end"]["chars"] == len(status["text"])
    # The proxy's own error frame is journaled but is not one of the stream's frames.
    assert got["end"]["frames"] == status["last_seq"] - 1


def test_the_live_tail_in_the_normalized_format(mock_server: str) -> None:
    call = CALLS["openai-chat"]
    with running_proxy(mock_server) as (proxy, _app):
        with httpx2.stream("POST", proxy + call.path, json=call.body,
                           headers=call.headers("seed=2; tokens=20; delay_ms=30"),
                           timeout=10) as created:
            stream_id = created.headers["unbroken-stream-id"]
        body = b""
        chunks: list[Any] = []
        with httpx2.stream("GET", f"{proxy}/v1/streams/{stream_id}/events?format=unbroken",
                           headers={"authorization": f"Bearer {KEY}"}, timeout=10) as response:
            for chunk in response.iter_raw():
                chunks.append(chunk)
                body += chunk
    got = fold_normalized(body, stream_id)
    assert len(chunks) > 2  # it arrived as it was made, not at once
    assert got["text"] == reply_text(2, 20)
    assert got["end"]["status"] == "completed"
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}


def test_a_cancel_ends_the_live_tail_cancelled(mock_server: str) -> None:
    call = CALLS["anthropic"]
    with running_proxy(mock_server) as (proxy, _app):
        with httpx2.stream("POST", proxy + call.path, json=call.body,
                           headers=call.headers("seed=3; tokens=400; delay_ms=20"),
                           timeout=10) as created:
            stream_id = created.headers["unbroken-stream-id"]
        body = b""
        cancels = 0
        with httpx2.stream("GET", f"{proxy}/v1/streams/{stream_id}/events?format=unbroken",
                           headers={"authorization": f"Bearer {KEY}"}, timeout=10) as response:
            for chunk in response.iter_raw():
                body += chunk
                if not cancels and body.count(b"event: delta") >= 3:
                    cancels += 1
                    cancelled = httpx2.post(f"{proxy}/v1/streams/{stream_id}/cancel",
                                            headers={"authorization": f"Bearer {KEY}"},
                                            timeout=10)
                    assert cancelled.status_code == 200
        status = stream_status(proxy, stream_id)
    got = fold_normalized(body, stream_id)
    assert status["status"] == "cancelled"
    assert got["end"]["status"] == "cancelled"
    assert got["text"] == status["text"]
    assert 0 < len(got["text"]) < len(reply_text(3, 400))


def test_an_app_stream_is_refused_by_name(mock_server: str, tmp_path: Path) -> None:
    """A stream of ``unbroken.server`` in a journal the proxy shares: its frames are the app's
    own, not a provider's, so the proxy does not pretend to normalize them."""
    store = f"sqlite:///{tmp_path}/journal.db"
    stream_id, token = "ub_" + "ab" * 12, "ubt_app-stream-token"

    async def create_app_stream() -> None:
        journal = journal_for(store)
        await journal.open()
        try:
            await journal.create(
                StreamMeta(stream_id=stream_id, dialect=APP_DIALECT, created=time.time(),
                           media_type="text/event-stream", token_hash=secret_hash(token)),
                StreamState(status=Status.COMPLETED, updated=time.time()))
        finally:
            await journal.close()

    asyncio.run(create_app_stream())
    with running_proxy(mock_server, store=store) as (proxy, _app):
        refused = httpx2.get(f"{proxy}/v1/streams/{stream_id}/events?format=unbroken&token="
                             + token, timeout=10)
    assert (refused.status_code, refused.json()["error"]["message"]) == (
        400, f"format=unbroken reads provider streams; stream {stream_id} is 'app', whose "
             "frames are already its own")
