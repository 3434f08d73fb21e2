"""Two proxy processes (replicas A and B) on one Redis journal: a stream produced by A is resumed,
followed, read, cancelled and recovered through B, with exactly one generation upstream.

Every test starts its own pair (``python -m unbroken.proxy --store redis://...``) with short
producer leases, so a SIGKILLed replica's streams are settled within seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx2
import pytest
from tests.integration.hardening_process import ProxyProcess, log_records
from tests.integration.test_proxy_support import (
    CALLS,
    DIALECTS,
    KEY,
    OTHER_KEY,
    Call,
    FrameReader,
    frames_of,
    message_of,
    mock_counts,
    stream_status,
)

from unbroken.finish import Status
from unbroken.mock import reply_text
from unbroken.proxy.wire import error_frame
from unbroken.resumption import ProxyMark
from unbroken.streams.journal import FrameRecord

pytestmark = pytest.mark.integration

LEASE = ("--lease-ttl", "2", "--lease-renew", "0.5", "--log-level", "info")
AUTH = {"authorization": f"Bearer {KEY}"}
# A Gemini POST carries `id:` lines only for a client that accepts event streams.
SSE = {"accept": "text/event-stream"}
TIMEOUT = httpx2.Timeout(20.0)
# A dead producer's stream is settled one lease (2 s) after its last renewal, by a follower's
# check (every 5 s while it waits) or a replica's sweep (every 2 s): well within this.
SETTLE_S = 20.0
CANCELLED = "unbroken proxy: the stream was cancelled"


@pytest.fixture
def replicas(
    redis_url: str, mock_server: str, tmp_path: Path
) -> Iterator[tuple[ProxyProcess, ProxyProcess]]:
    """Replicas A and B in front of the mock, sharing the test's (emptied) Redis."""
    with ThreadPoolExecutor(2) as pool:  # each start waits ~1 s for its /healthz
        starting = [pool.submit(ProxyProcess.start, mock_server, redis_url,
                                tmp_path / f"{name}.log", *LEASE) for name in "ab"]
    started = [future.result() for future in starting if future.exception() is None]
    try:
        for future in starting:
            future.result()  # re-raises a failed start (the other one is stopped below)
        yield started[0], started[1]
    finally:
        with ThreadPoolExecutor(2) as pool:  # SIGTERM both at once; a killed one is reaped
            list(pool.map(ProxyProcess.terminate, started))


def sse_frame(stream_id: str, frame: FrameRecord) -> tuple[str, str, str | None]:
    """How an SSE frame of the journal reads downstream: (event, data, id)."""
    return (frame.event or "message", frame.data.decode(), f"{stream_id}:{frame.seq}")


def read_as_sse(frames: list[Any]) -> list[tuple[str, str, str | None]]:
    return [(frame.event, frame.data, frame.block_id) for frame in frames]


def ids(stream_id: str, first: int, last: int) -> list[str | None]:
    return [f"{stream_id}:{n}" for n in range(first, last + 1)]


def metric(proxy: ProxyProcess, name: str) -> str:
    """One counter's value in the replica's /metrics text."""
    lines = httpx2.get(proxy.base_url + "/metrics", timeout=TIMEOUT).text.splitlines()
    [value] = [line.partition(" ")[2] for line in lines if line.partition(" ")[0] == name]
    return value


def generations(*calls: Call) -> dict[str, dict[str, int]]:
    """The mock's counts when each call generated once and nothing was resumed upstream."""
    return {"generations": {call.path.partition("?")[0]: 1 for call in calls}, "resumes": {}}


def wait_until_no_live_streams(proxy: ProxyProcess) -> None:
    """Poll the replica's /healthz (bounded) until it produces no stream."""
    deadline = time.monotonic() + SETTLE_S
    while httpx2.get(proxy.base_url + "/healthz", timeout=TIMEOUT).json()["live_streams"]:
        assert time.monotonic() < deadline, "the producer never stopped"
        time.sleep(0.05)


def wait_for_log_event(proxy: ProxyProcess, event: str, stream_id: str) -> dict[str, Any]:
    """The replica's log record of ``event`` for the stream, once it appears (bounded)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        found = [record for record in log_records(proxy.log)
                 if record.get("event") == event and record.get("stream_id") == stream_id]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no {event} for {stream_id} in {proxy.log.name}"
        time.sleep(0.05)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_post_cut_off_on_a_resumes_on_b_with_the_rest_and_no_new_generation(
    replicas: tuple[ProxyProcess, ProxyProcess], mock_server: str, dialect: str
) -> None:
    a, b = replicas
    call = CALLS[dialect]
    seed, tokens = 7, 12
    total = call.total(tokens)
    cut = call.first_text + 2  # two text frames in
    headers = call.headers(f"seed={seed}; tokens={tokens}; delay_ms=30") | SSE
    with httpx2.stream("POST", a.base_url + call.path, json=call.body, headers=headers,
                       timeout=TIMEOUT) as response:
        assert response.status_code == 200
        stream_id = response.headers["unbroken-stream-id"]
        head = FrameReader(response, dialect).take(cut)
    # Disconnected from A, which keeps generating; the same POST again, on B.
    resumed = httpx2.post(b.base_url + call.path, json=call.body, timeout=TIMEOUT,
                          headers=headers | {"Last-Event-ID": f"{stream_id}:{cut}"})
    assert resumed.status_code == 200, resumed.text
    assert resumed.headers["unbroken-stream-id"] == stream_id
    rest = frames_of(dialect, resumed.content)
    head_body = b"".join(frame.raw for frame in head)
    if dialect == "ollama":
        # NDJSON has no ids: the lines after the cut, as the upstream wrote them.
        assert resumed.headers["content-type"].startswith("application/x-ndjson")
        lines = [line.value for line in head + rest]
        assert [line["done"] for line in lines] == [False] * tokens + [True]
        assert "".join(line["message"]["content"] for line in lines[:-1]) == reply_text(
            seed, tokens)
        joined = message_of(dialect, head_body + resumed.content)
    else:
        assert [frame.block_id for frame in head + rest] == ids(stream_id, 1, total)
        joined = message_of(dialect, head_body, resumed.content)
    assert len(rest) == total - cut
    # Not one character twice, none missing.
    assert call.text_after(seed, tokens, cut) + message_of(dialect, resumed.content).text == (
        reply_text(seed, tokens))
    assert (joined.text, joined.status, joined.duplicates) == (
        reply_text(seed, tokens), Status.COMPLETED, 0)
    assert mock_counts(mock_server) == generations(call)
    assert (metric(a, "unbroken_streams_started_total"), metric(b, "unbroken_resumes_total"),
            metric(b, "unbroken_streams_started_total")) == ("1", "1", "0")
    status = stream_status(b.base_url, stream_id)
    assert (status["status"], status["last_seq"], status["text"]) == (
        "completed", total, reply_text(seed, tokens))


def test_the_events_endpoint_on_b_follows_a_stream_live_on_a_through_its_end(
    replicas: tuple[ProxyProcess, ProxyProcess], mock_server: str
) -> None:
    a, b = replicas
    call = CALLS["anthropic"]
    seed, tokens, after = 11, 20, 5
    total = call.total(tokens)
    # Frame after+1 comes at once, then the upstream pauses 5 s: the stream is surely live
    # while B's reader attaches, even on a slow machine; then the rest trickles in 20 ms apart.
    scenario = f"seed={seed}; tokens={tokens}; delay_ms=20; stall_after={after + 1}; stall_s=5"
    with httpx2.stream("POST", a.base_url + call.path, json=call.body, timeout=TIMEOUT,
                       headers=call.headers(scenario)) as response:
        stream_id = response.headers["unbroken-stream-id"]
        on_a = FrameReader(response, "anthropic")
        on_a.take(after)
        assert stream_status(b.base_url, stream_id)["status"] == "streaming"
        with httpx2.stream("GET", f"{b.base_url}/v1/streams/{stream_id}/events?after={after}",
                           headers=AUTH, timeout=TIMEOUT) as events:
            assert events.status_code == 200
            assert events.headers["content-type"] == "text/event-stream; charset=utf-8"
            on_b = FrameReader(events, "anthropic")
            first = on_b.take(1)
            assert stream_status(b.base_url, stream_id)["status"] == "streaming"
            tail = first + on_b.rest()
        rest_on_a = on_a.rest()
    assert [frame.block_id for frame in tail] == ids(stream_id, after + 1, total)
    # Byte for byte what A's own reader got after the same seq.
    assert read_as_sse(tail) == read_as_sse(rest_on_a)
    assert message_of("anthropic", b"".join(frame.raw for frame in tail)).text == (
        reply_text(seed, tokens)[len(call.text_after(seed, tokens, after)):])
    on_b_status, on_a_status = stream_status(b.base_url, stream_id), stream_status(
        a.base_url, stream_id)
    assert on_b_status == on_a_status
    assert (on_b_status["status"], on_b_status["finish_reason"], on_b_status["last_seq"],
            on_b_status["text"], on_b_status["upstream_requests"]) == (
        "completed", "stop", total, reply_text(seed, tokens), 1)
    assert mock_counts(mock_server) == generations(call)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_cancel_on_b_stops_the_generation_on_a(
    replicas: tuple[ProxyProcess, ProxyProcess], mock_server: str, dialect: str
) -> None:
    a, b = replicas
    call = CALLS[dialect]
    seed, tokens = 5, 20
    taken = call.first_text + 1
    scenario = f"seed={seed}; tokens={tokens}; stall_after={taken}; stall_s=30"
    with httpx2.stream("POST", a.base_url + call.path, json=call.body, timeout=TIMEOUT,
                       headers=call.headers(scenario) | SSE) as response:
        stream_id = response.headers["unbroken-stream-id"]
        reader = FrameReader(response, dialect)
        head = reader.take(taken)
        cancelled = httpx2.post(f"{b.base_url}/v1/streams/{stream_id}/cancel", headers=AUTH,
                                timeout=TIMEOUT)
        assert cancelled.status_code == 200
        tail = reader.rest()  # A's reader: the cancelled end, then the body ends
    # The producer on A wrote the end, in the dialect's own error format.
    end = error_frame(dialect, taken + 1, ended_mark("stream_cancelled", CANCELLED),
                      taken if dialect == "openai-responses" else None)
    assert len(head) + len(tail) == taken + 1 < call.total(tokens)  # stopped early
    if dialect == "ollama":
        assert [line.raw.rstrip(b"\r\n") for line in tail] == [end.data]
    else:
        assert read_as_sse(tail) == [sse_frame(stream_id, end)]
    summary = cancelled.json()
    assert (summary["status"], summary["last_seq"], summary["text"]) == (
        "cancelled", taken + 1, call.text_after(seed, tokens, taken))
    assert stream_status(a.base_url, stream_id) == stream_status(b.base_url, stream_id) == summary
    wait_until_no_live_streams(a)  # A's producer is gone, not only the stream marked
    assert mock_counts(mock_server) == generations(call)


def test_sigkill_of_a_ends_its_streams_on_b_interrupted_with_their_prefix(
    replicas: tuple[ProxyProcess, ProxyProcess], mock_server: str
) -> None:
    a, b = replicas
    followed, unread = CALLS["openai-chat"], CALLS["anthropic"]
    followed_taken, unread_taken = 6, 7
    with ExitStack() as stack:
        response = stack.enter_context(httpx2.stream(
            "POST", a.base_url + followed.path, json=followed.body, timeout=TIMEOUT,
            headers=followed.headers(f"seed=31; tokens=10; stall_after={followed_taken}; "
                                     "stall_s=30")))
        followed_id = response.headers["unbroken-stream-id"]
        FrameReader(response, "openai-chat").take(followed_taken)
        response = stack.enter_context(httpx2.stream(
            "POST", a.base_url + unread.path, json=unread.body, timeout=TIMEOUT,
            headers=unread.headers(f"seed=32; tokens=10; stall_after={unread_taken}; "
                                   "stall_s=30")))
        unread_id = response.headers["unbroken-stream-id"]
        unread_head = FrameReader(response, "anthropic").take(unread_taken)
        # B's reader catches up with the journal, then waits on A's live stream.
        events = stack.enter_context(httpx2.stream(
            "GET", f"{b.base_url}/v1/streams/{followed_id}/events?after=2", headers=AUTH,
            timeout=TIMEOUT))
        follower = FrameReader(events, "openai-chat")
        assert [frame.block_id for frame in follower.take(followed_taken - 2)] == ids(
            followed_id, 3, followed_taken)
        a.kill()
        # A's lease runs out; B settles the stream and its reader gets the end (the read
        # timeout bounds the wait).
        [end] = follower.rest()
    status = stream_status(b.base_url, followed_id)
    assert (status["status"], status["last_seq"], status["text"], status["error"]["type"]) == (
        "interrupted", followed_taken + 1, followed.text_after(31, 10, followed_taken),
        "proxy_restarted")
    assert read_as_sse([end]) == [sse_frame(followed_id, error_frame(
        "openai-chat", followed_taken + 1,
        ended_mark("proxy_restarted", status["error"]["message"])))]

    # Nobody reads the other stream: B's periodic sweep settles it (nothing here touches it
    # on B before the sweep's log line).
    wait_for_log_event(b, "stream.recovered", unread_id)
    status = stream_status(b.base_url, unread_id)
    assert (status["status"], status["last_seq"], status["text"], status["error"]["type"]) == (
        "interrupted", unread_taken + 1, unread.text_after(32, 10, unread_taken),
        "proxy_restarted")
    stored = frames_of("anthropic", httpx2.get(
        f"{b.base_url}/v1/streams/{unread_id}/events", headers=AUTH, timeout=TIMEOUT).content)
    assert read_as_sse(stored) == [
        (frame.event, frame.data, f"{unread_id}:{n}") for n, frame in enumerate(unread_head, 1)
    ] + [sse_frame(unread_id, error_frame(
        "anthropic", unread_taken + 1, ended_mark("proxy_restarted", status["error"]["message"])))]
    # Each stream settled once, by B; nothing generated again.
    recovered = sorted((record["stream_id"], record["seq"]) for record in log_records(b.log)
                       if record.get("event") == "stream.recovered")
    assert recovered == sorted([(followed_id, str(followed_taken + 1)),
                                (unread_id, str(unread_taken + 1))])
    assert mock_counts(mock_server) == generations(followed, unread)


def test_only_the_creating_credential_or_the_stream_token_reads_it_on_b(
    replicas: tuple[ProxyProcess, ProxyProcess], mock_server: str
) -> None:
    a, b = replicas
    call = CALLS["openai-chat"]
    seed, tokens = 41, 6
    total = call.total(tokens)
    created = httpx2.post(a.base_url + call.path, json=call.body, timeout=TIMEOUT,
                          headers=call.headers(f"seed={seed}; tokens={tokens}"))
    assert created.status_code == 200
    stream_id = created.headers["unbroken-stream-id"]
    token = created.headers["unbroken-stream-token"]
    other = {"authorization": f"Bearer {OTHER_KEY}"}
    base = f"{b.base_url}/v1/streams/{stream_id}"
    for headers in (other, {}):
        assert httpx2.get(base, headers=headers, timeout=TIMEOUT).status_code == 404
        assert httpx2.get(base + "/events", headers=headers, timeout=TIMEOUT).status_code == 404
        assert httpx2.post(base + "/cancel", headers=headers, timeout=TIMEOUT).status_code == 404
    resumed = httpx2.post(b.base_url + call.path, json=call.body, timeout=TIMEOUT,
                          headers=call.headers("", OTHER_KEY) | {"Last-Event-ID": f"{stream_id}:2"})
    assert resumed.status_code == 404
    assert resumed.json()["error"]["message"] == f"unbroken proxy: no stream {stream_id}"

    by_token = httpx2.get(f"{base}/events?token={token}", timeout=TIMEOUT)
    assert by_token.status_code == 200
    read = frames_of("openai-chat", by_token.content)
    assert [frame.block_id for frame in read] == ids(stream_id, 1, total)
    assert read_as_sse(read) == read_as_sse(frames_of("openai-chat", created.content))
    status = httpx2.get(f"{base}?token={token}", timeout=TIMEOUT)
    assert status.status_code == 200
    assert (status.json()["status"], status.json()["text"]) == ("completed", reply_text(seed,
                                                                                        tokens))
    assert stream_status(b.base_url, stream_id) == status.json()  # the owner's key, on B
    assert mock_counts(mock_server) == generations(call)


def ended_mark(code: str, message: str) -> ProxyMark:
    """The mark of a frame the proxy journaled to end a stream."""
    status = "cancelled" if code == "stream_cancelled" else "interrupted"
    return ProxyMark(code=code, status=status, resumable=False, message=message)
