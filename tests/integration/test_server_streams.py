"""``unbroken.server`` under a real uvicorn on 127.0.0.1: resume after a cut for every kind of
source value, concurrent followers, one producer per idempotency key, cancel, the end states,
access, and bad input."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from tests.integration.server_app import RUNS, build_app
from tests.servers import serve_in_thread

from unbroken.framing import ServerSentEvent, SSEDecoder

pytestmark = pytest.mark.integration

OWNER = {"owner": "alice"}


@pytest.fixture
def app_url(tmp_path: Path, mock_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("UNBROKEN_TEST_MOCK", mock_server)
    app, _streams = build_app(f"sqlite:///{tmp_path / 'app.db'}", keepalive=0.5,
                              idle_timeout=1.0)
    with serve_in_thread(app) as url:
        yield url


def start(url: str, **query: Any) -> dict[str, Any]:
    response = httpx2.post(url + "/start", params={"owner": "alice", **query}, timeout=10)
    assert response.status_code == 200, response.text
    started: dict[str, Any] = response.json()
    return started


def read_events(url: str, stream_id: str, *, limit: int | None = None,
                headers: dict[str, str] | None = None,
                params: dict[str, str] | None = None) -> tuple[int, list[ServerSentEvent]]:
    """The status and the events of one response; with ``limit``, the connection is cut
    after that many events."""
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    with httpx2.stream("GET", f"{url}/s/{stream_id}/events", params=params or OWNER,
                       headers=headers or {}, timeout=20) as response:
        if response.status_code != 200:
            response.read()
            return response.status_code, []
        for chunk in response.iter_raw():
            events += decoder.receive_data(chunk)
            if limit is not None and len(events) >= limit:
                return 200, events[:limit]
    return 200, events + decoder.receive_eof()


def end_of(events: list[ServerSentEvent]) -> dict[str, Any]:
    assert events[-1].event == "end", events[-1]
    end: dict[str, Any] = json.loads(events[-1].data)
    return end


def values(events: list[ServerSentEvent]) -> list[tuple[str, str, str]]:
    """What a frame says (the first of a response also carries ``retry:``)."""
    return [(event.event, event.data, event.id) for event in events]


def ids(events: list[ServerSentEvent]) -> list[int]:
    return [int(event.id.rpartition(":")[2]) for event in events]


EXPECTED_FIRST = {
    "str": ("text", json.dumps("t1\r\n✓ ", ensure_ascii=False, separators=(",", ":"))),
    "dict": ("message", '{"i":1,"text":"d1"}'),
    "sse": ("tick", "line 1\nsecond line"),
    "events": ("text", '"e1 "'),
}


@pytest.mark.parametrize("kind", ["str", "dict", "sse", "events", "astream", "sdk"])
def test_a_cut_client_resumes_with_exactly_the_rest(app_url: str, kind: str) -> None:
    started = start(app_url, kind=kind, n=8, interval=0.05)
    stream_id = started["stream_id"]
    status, first = read_events(app_url, stream_id, limit=3)
    assert status == 200
    assert ids(first) == [1, 2, 3]
    if kind in EXPECTED_FIRST:
        assert (first[0].event, first[0].data) == EXPECTED_FIRST[kind]
    status, rest = read_events(app_url, stream_id,
                               headers={"last-event-id": first[-1].id})
    assert status == 200
    _status, whole = read_events(app_url, stream_id)
    assert values(first + rest) == values(whole)  # nothing repeated, nothing lost
    assert ids(whole) == list(range(1, len(whole) + 1))
    end = end_of(whole)
    if kind in ("astream", "sdk", "events"):
        # The tracked message (or the Finish event) decides the end.
        assert (end["status"], end["finish_reason"], end["raw_finish_reason"]) == (
            "truncated", "length", "length")
    else:
        assert end == {"status": "completed", "finish_reason": "stop",
                       "raw_finish_reason": None, "error": None}
        assert len(whole) == 9  # 8 values and the end
    got = httpx2.get(f"{app_url}/streams/{stream_id}", headers={"x-owner": "alice"}, timeout=10)
    assert got.json()["status"] == end["status"]
    if kind == "str":
        assert got.json()["text"] == "".join(f"t{i}\r\n✓ " for i in range(1, 9))
    # after= works as Last-Event-ID does; an EventSource past the end is told to stop.
    _status, tail = read_events(app_url, stream_id, params={**OWNER, "after": "7"})
    assert values(tail) == values(whole[7:])
    ended = httpx2.get(f"{app_url}/s/{stream_id}/events", params=OWNER, timeout=10,
                       headers={"accept": "text/event-stream",
                                "last-event-id": whole[-1].id})
    assert ended.status_code == 204


def test_ten_concurrent_followers_get_identical_frames(app_url: str) -> None:
    stream_id = start(app_url, kind="dict", n=30, interval=0.02)["stream_id"]
    results: list[list[ServerSentEvent]] = [[] for _ in range(10)]

    def follow(index: int) -> None:
        results[index] = read_events(app_url, stream_id)[1]

    threads = [threading.Thread(target=follow, args=(i,)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(values(result) == values(results[0]) for result in results)
    assert ids(results[0]) == list(range(1, 32))
    assert end_of(results[0])["status"] == "completed"


def test_concurrent_starts_with_one_key_run_one_producer(app_url: str) -> None:
    before = RUNS["started"]
    answers: list[dict[str, Any]] = []

    def start_one() -> None:
        answers.append(start(app_url, kind="str", n=5, interval=0.05, key="click-1"))

    threads = [threading.Thread(target=start_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(answers) == 4
    assert len({answer["stream_id"] for answer in answers}) == 1
    assert sorted(answer["created"] for answer in answers) == [False, False, False, True]
    assert [answer["token"] is None for answer in answers].count(False) == 1
    assert RUNS["started"] - before == 1
    # A stream id given by the app is the same: one producer, the second start attaches.
    first = start(app_url, kind="str", n=2, id="chat-42")
    second = start(app_url, kind="str", n=2, id="chat-42")
    assert (first["created"], second["created"]) == (True, False)
    assert RUNS["started"] - before == 2
    taken = httpx2.post(app_url + "/start", params={"owner": "bob", "id": "chat-42"},
                        timeout=10)
    assert taken.status_code == 409


def test_cancel_stops_the_producer_and_a_leaving_client_does_not(app_url: str) -> None:
    closed = RUNS["closed"]
    stream_id = start(app_url, kind="str", n=400, interval=0.02)["stream_id"]
    _status, first = read_events(app_url, stream_id, limit=2)  # the client leaves
    time.sleep(0.3)
    live = httpx2.get(f"{app_url}/streams/{stream_id}", headers={"x-owner": "alice"},
                      timeout=10).json()
    assert live["status"] == "streaming" and live["last_seq"] > 2  # it went on without us
    cancelled = httpx2.post(f"{app_url}/streams/{stream_id}/cancel",
                            headers={"x-owner": "alice"}, timeout=10)
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert RUNS["closed"] == closed + 1  # the generator's finally ran
    _status, whole = read_events(app_url, stream_id)
    assert end_of(whole) == {"status": "cancelled", "finish_reason": None,
                             "raw_finish_reason": None, "error": None}
    assert ids(whole) == list(range(1, cancelled.json()["last_seq"] + 1))
    assert values(whole[:2]) == values(first)


def test_only_the_owner_or_the_token_reads(app_url: str) -> None:
    started = start(app_url, kind="str", n=3)
    stream_id, token = started["stream_id"], started["token"]
    assert read_events(app_url, stream_id, params={"owner": "mallory"})[0] == 404
    assert read_events(app_url, stream_id, params={"token": "ubt_wrong"})[0] == 404
    status, events = read_events(app_url, stream_id, params={"token": token})
    assert status == 200 and end_of(events)["status"] == "completed"
    assert httpx2.get(f"{app_url}/streams/{stream_id}", headers={"x-owner": "mallory"},
                      timeout=10).status_code == 404
    assert httpx2.post(f"{app_url}/streams/{stream_id}/cancel", headers={"x-owner": "bob"},
                       timeout=10).status_code == 404
    listed = httpx2.get(f"{app_url}/streams/", headers={"x-owner": "alice"}, timeout=10)
    assert stream_id in [s["id"] for s in listed.json()["streams"]]
    other = httpx2.get(f"{app_url}/streams/", headers={"x-owner": "mallory"}, timeout=10)
    assert other.json()["streams"] == []
    assert httpx2.get(f"{app_url}/streams/", timeout=10).status_code == 401


def test_a_raising_source_fails_without_a_traceback_on_the_wire(app_url: str) -> None:
    stream_id = start(app_url, kind="raise", n=5)["stream_id"]
    _status, events = read_events(app_url, stream_id)
    assert [event.data for event in events[:-1]] == ['"r1"', '"r2"']
    assert end_of(events) == {
        "status": "failed", "finish_reason": "error", "raw_finish_reason": None,
        "error": {"type": "RuntimeError", "message": "the model backend said no"}}
    body = httpx2.get(f"{app_url}/s/{stream_id}/events", params=OWNER, timeout=10).text
    assert "Traceback" not in body and "server_app.py" not in body


def test_a_source_that_never_yields_is_bounded(app_url: str) -> None:
    stream_id = start(app_url, kind="never", n=0)["stream_id"]
    _status, events = read_events(app_url, stream_id)  # idle_timeout=1.0 ends it
    assert ids(events) == [1]
    assert end_of(events) == {
        "status": "interrupted", "finish_reason": None, "raw_finish_reason": None,
        "error": {"type": "IdleTimeout",
                  "message": "the source yielded nothing for idle_timeout (1 s)"}}


def test_an_unsupported_value_fails_the_stream_naming_its_type(app_url: str) -> None:
    stream_id = start(app_url, kind="unsupported", n=4)["stream_id"]
    _status, events = read_events(app_url, stream_id)
    assert [event.data for event in events[:-1]] == ['"u1"']
    end = end_of(events)
    assert end["status"] == "failed"
    assert end["error"]["type"] == "UnsupportedValueError"
    assert end["error"]["message"].endswith("not int")


def test_bad_input(app_url: str) -> None:
    stream_id = start(app_url, kind="str", n=2)["stream_id"]
    _status, events = read_events(app_url, stream_id)
    unknown = httpx2.get(f"{app_url}/s/ub_000000000000000000000000/events", params=OWNER,
                         timeout=10)
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "not_found"
    for bad in ("garbage", f"{stream_id}:x", f"{stream_id}:-1", "ub_other:3", f"{stream_id}:"):
        answer = httpx2.get(f"{app_url}/s/{stream_id}/events", params=OWNER, timeout=10,
                            headers={"last-event-id": bad})
        assert answer.status_code == 400, bad
        assert "Last-Event-ID" in answer.json()["error"]["message"]
    assert httpx2.get(f"{app_url}/s/{stream_id}/events", params={**OWNER, "after": "two"},
                      timeout=10).status_code == 400
    stopped = httpx2.get(f"{app_url}/s/{stream_id}/events", params=OWNER, timeout=10,
                         headers={"accept": "text/event-stream",
                                  "last-event-id": events[-1].id})
    assert stopped.status_code == 204 and stopped.content == b""
