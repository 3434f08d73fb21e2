"""A client that disconnects after N frames and resumes gets exactly the rest: no loss, no
duplicate, one generation upstream."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import httpx2
import pytest
from httpx_sse import connect_sse
from tests.integration.test_proxy_support import (
    CALLS,
    DIALECTS,
    KEY,
    frames_of,
    message_of,
    mock_counts,
    read_some,
    running_proxy,
    stream_status,
)

from unbroken.client import stream as unbroken_stream
from unbroken.events import TextDelta
from unbroken.finish import Status
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

SEED, TOKENS = 7, 12
# Slow enough that a disconnect lands while the generation is still running.
SCENARIO = f"seed={SEED}; tokens={TOKENS}; delay_ms=15"


@pytest.fixture(scope="module")
def proxy(mock_server_session: str) -> Iterator[str]:
    with running_proxy(mock_server_session) as (base_url, _app):
        yield base_url


@pytest.fixture
def mock(mock_server: str) -> str:
    return mock_server


def ids_of(frames: list[object]) -> list[str]:
    return [frame.id for frame in frames]  # type: ignore[attr-defined]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("cut", [1, 5])
def test_disconnect_then_resume_on_the_events_endpoint(
    proxy: str, mock: str, dialect: str, cut: int
) -> None:
    call = CALLS[dialect]
    total = call.total(TOKENS)
    with httpx2.Client(base_url=proxy, timeout=10) as client:
        with client.stream("POST", call.path, json=call.body,
                           headers=call.headers(SCENARIO)) as response:
            assert response.status_code == 200
            stream_id = response.headers["unbroken-stream-id"]
            read_some(response, dialect, cut)
        # Disconnected. The same frames again, with ids, from the events endpoint:
        response = client.get(f"/v1/streams/{stream_id}/events?after={cut}",
                              headers={"authorization": f"Bearer {KEY}"})
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        rest = frames_of("openai-chat", response.content)
        assert ids_of(rest) == [f"{stream_id}:{seq}" for seq in range(cut + 1, total + 1)]
        everything = client.get(f"/v1/streams/{stream_id}/events",
                                headers={"authorization": f"Bearer {KEY}"}).content
    message = message_of(dialect, everything)
    assert message.text == reply_text(SEED, TOKENS)
    assert message.status is Status.COMPLETED
    # Prefix (from the POST, whatever its framing) + resumed frames: the exact text.
    head_text = call.text_after(SEED, TOKENS, cut)
    resumed = message_of(dialect, response.content)
    assert head_text + resumed.text == reply_text(SEED, TOKENS)
    assert resumed.duplicates == 0
    assert mock_counts(mock)["generations"] == {call.path.split("?")[0]: 1}
    status = stream_status(proxy, stream_id)
    assert (status["status"], status["last_seq"], status["upstream_requests"]) == (
        "completed", total, 1
    )
    assert status["text"] == reply_text(SEED, TOKENS)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_same_post_with_last_event_id_answers_the_rest_in_the_dialect(
    proxy: str, mock: str, dialect: str
) -> None:
    call = CALLS[dialect]
    cut = 4
    with httpx2.Client(base_url=proxy, timeout=10) as client:
        full = client.post(call.path, json=call.body, headers=call.headers(f"seed={SEED}; "
                                                                             f"tokens={TOKENS}"))
        assert full.status_code == 200
        with client.stream("POST", call.path, json=call.body,
                           headers=call.headers(SCENARIO)) as response:
            stream_id = response.headers["unbroken-stream-id"]
            assert response.headers["unbroken-stream-token"]
            head, head_frames = read_some(response, dialect, cut)
        headers = call.headers(SCENARIO) | {"Last-Event-ID": f"{stream_id}:{cut}"}
        resumed = client.post(call.path, json=call.body, headers=headers)
    assert resumed.status_code == 200
    assert resumed.headers["unbroken-stream-id"] == stream_id
    assert "unbroken-stream-token" not in resumed.headers
    whole = frames_of(dialect, full.content)
    rest = frames_of(dialect, resumed.content)
    if dialect == "ollama":
        # NDJSON: the upstream's lines verbatim, no ids.
        assert resumed.headers["content-type"].startswith("application/x-ndjson")
        assert [line.raw for line in head_frames + rest] == [line.raw for line in whole]
    else:
        # The same events as a stream never cut, whatever the ids.
        assert [(e.event, e.data) for e in head_frames + rest] == [
            (e.event, e.data) for e in whole
        ]
        if dialect != "gemini":
            assert ids_of(rest) == [
                f"{stream_id}:{seq}" for seq in range(cut + 1, call.total(TOKENS) + 1)
            ]
            message = message_of(dialect, head, resumed.content)
            assert message.text == reply_text(SEED, TOKENS)
            assert message.duplicates == 0
    # The full stream and the cut one: two generations, the resume none.
    assert mock_counts(mock)["generations"] == {call.path.split("?")[0]: 2}


@pytest.mark.parametrize("dialect", ["openai-chat", "openai-responses", "anthropic"])
def test_unbroken_stream_resumes_from_where_a_raw_reader_left(
    proxy: str, mock: str, dialect: str
) -> None:
    call = CALLS[dialect]
    cut = 6
    with httpx2.Client(base_url=proxy, timeout=10) as client:
        with client.stream("POST", call.path, json=call.body,
                           headers=call.headers(SCENARIO)) as response:
            stream_id = response.headers["unbroken-stream-id"]
            read_some(response, dialect, cut)
    headers = call.headers(SCENARIO) | {"Last-Event-ID": f"{stream_id}:{cut}"}
    with unbroken_stream("POST", proxy + call.path, dialect=dialect, json=call.body,
                         headers=headers) as resumed:
        texts = [event.text for event in resumed if isinstance(event, TextDelta)]
    assert call.text_after(SEED, TOKENS, cut) + "".join(texts) == reply_text(SEED, TOKENS)
    assert resumed.message.status is Status.COMPLETED
    assert resumed.message.duplicates == 0
    assert mock_counts(mock)["generations"] == {call.path: 1}


def test_unbroken_stream_through_the_proxy(proxy: str, mock: str) -> None:
    call = CALLS["anthropic"]
    with unbroken_stream("POST", proxy + call.path, dialect="anthropic", json=call.body,
                         headers=call.headers(SCENARIO)) as s:
        text = "".join(event.text for event in s if isinstance(event, TextDelta))
    assert text == reply_text(SEED, TOKENS)
    assert s.message.status is Status.COMPLETED
    assert s.message.last_seq == call.total(TOKENS)


def test_event_source_semantics_with_token(proxy: str, mock: str) -> None:
    call = CALLS["openai-chat"]
    with httpx.Client(base_url=proxy, timeout=10) as client:  # httpx-sse is built on httpx
        # A stream created without any credential: only its token reads it.
        response = client.post(call.path, json=call.body, headers=call.headers(SCENARIO, None))
        stream_id = response.headers["unbroken-stream-id"]
        token = response.headers["unbroken-stream-token"]
        url = f"/v1/streams/{stream_id}/events"
        assert client.get(url, headers={"accept": "text/event-stream"}).status_code == 404
        with connect_sse(client, "GET", f"{url}?token={token}") as source:
            events = list(source.iter_sse())
        total = call.total(TOKENS)
        assert [event.id for event in events] == [f"{stream_id}:{n}" for n in range(1, total + 1)]
        assert events[0].retry == 1000
        assert events[-1].data == "[DONE]"
        # A browser reconnects with the last id after the end: 204 tells it to stop.
        again = client.get(f"{url}?token={token}", headers={
            "accept": "text/event-stream", "last-event-id": events[-1].id})
        assert again.status_code == 204
        # Last-Event-ID wins over ?after=.
        header_wins = client.get(f"{url}?token={token}&after=1",
                                 headers={"last-event-id": f"{stream_id}:{total - 1}"})
        assert [e.id for e in frames_of("openai-chat", header_wins.content)] == [
            f"{stream_id}:{total}"
        ]
        assert client.get(f"{url}?token={token}&after=x").status_code == 400
        foreign = client.get(f"{url}?token={token}", headers={"last-event-id": "ub_other:3"})
        assert foreign.status_code == 400
    assert mock_counts(mock)["generations"] == {call.path: 1}


def test_a_gemini_post_carries_ids_only_for_a_client_that_accepts_event_streams(
    proxy: str, mock: str
) -> None:
    # google-genai reads an `id:` line as JSON and fails, and asks for */*: no ids for it. An SSE
    # client that asks for text/event-stream gets them, and resumes the same POST with them.
    call = CALLS["gemini"]
    total = call.total(TOKENS)
    cut = 3
    with httpx.Client(base_url=proxy, timeout=10) as client:
        plain = client.post(call.path, json=call.body, headers=call.headers(SCENARIO))
        assert b"\nid: " not in b"\n" + plain.content
        assert [e.id for e in frames_of("gemini", plain.content)] == [""] * total
        with connect_sse(client, "POST", call.path, json=call.body,
                         headers=call.headers(SCENARIO)) as source:
            stream_id = source.response.headers["unbroken-stream-id"]
            head = []
            for event in source.iter_sse():
                head.append(event)
                if len(head) == cut:
                    break
        assert [e.id for e in head] == [f"{stream_id}:{n}" for n in range(1, cut + 1)]
        with connect_sse(client, "POST", call.path, json=call.body,
                         headers=call.headers(SCENARIO) | {"last-event-id": head[-1].id}) as rest:
            tail = list(rest.iter_sse())
    assert [e.id for e in tail] == [f"{stream_id}:{n}" for n in range(cut + 1, total + 1)]
    message = message_of("gemini", "".join(
        f"data: {e.data}\n\n" for e in head + tail).encode())
    assert message.text == reply_text(SEED, TOKENS)
    assert message.duplicates == 0
    # Two generations (the plain POST and the SSE one); the resume made none.
    assert mock_counts(mock)["generations"] == {call.path.split("?")[0]: 2}
