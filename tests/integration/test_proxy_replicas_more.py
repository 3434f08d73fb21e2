"""Two proxy replicas (A and B) on one Redis journal, continued: an ``Idempotency-Key`` posted on
B attaches to the stream A is producing; a client that resumed on B by re-POSTing with
``Last-Event-ID`` gets the dialect's error frame when A is SIGKILLed; a Responses background
stream left by a SIGKILLed A is re-attached upstream on B by its owner; an owner's resume that
reaches B before the dead A's lease ran out ends with ``proxy_restarted``, not an empty body; one
key posted on A and B at once makes one generation.

The pair and its helpers come from ``test_proxy_replicas.py`` (``python -m unbroken.proxy``
twice, producer leases of 2 s renewed every 0.5 s).
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send
from tests.integration.hardening_process import ProxyProcess, log_records
from tests.integration.test_proxy_replicas import (
    LEASE,
    SETTLE_S,
    SSE,
    TIMEOUT,
    generations,
    ids,
    metric,
    read_as_sse,
    replicas,
    sse_frame,
)
from tests.integration.test_proxy_support import (
    CALLS,
    DIALECTS,
    FrameReader,
    frames_of,
    message_of,
    mock_counts,
    stream_status,
)
from tests.servers import serve_in_thread

from unbroken.errors import ProxyInterrupted
from unbroken.finish import Status
from unbroken.mock import create_app as create_mock
from unbroken.mock import reply_text
from unbroken.proxy.wire import error_frame
from unbroken.resumption import ProxyMark

__all__ = ["replicas"]  # the fixture of test_proxy_replicas.py, used here by name

pytestmark = pytest.mark.integration

CHANGED = "unbroken proxy: this Idempotency-Key was used with a different request"
LEASE_EXPIRED = ("unbroken proxy: the proxy producing this stream stopped (its process is gone "
                 "or its lease expired) before the stream finished")
BACKGROUND = {"model": "m", "stream": True, "input": "hi", "background": True}


def status_when_settled(proxy: ProxyProcess, stream_id: str) -> dict[str, Any]:
    """The stream's status on ``proxy`` once its dead producer's lease ran out (bounded): a
    status read settles a stream whose lease expired, and B's sweep does too."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        status = stream_status(proxy.base_url, stream_id)
        if status["status"] != "streaming":
            return status
        assert time.monotonic() < deadline, "the dead producer's lease never ran out"
        time.sleep(0.1)


def provider_seqs(frames: list[Any]) -> list[int]:
    """The Responses ``sequence_number`` of each frame."""
    return [int(frame.data.split('"sequence_number":')[1].split(",")[0].rstrip("}"))
            for frame in frames]


def test_an_idempotency_key_on_b_attaches_to_the_stream_a_is_producing(
    replicas: tuple[ProxyProcess, ProxyProcess], mock_server: str
) -> None:
    a, b = replicas
    call = CALLS["openai-chat"]
    seed, tokens = 13, 10
    total = call.total(tokens)
    taken = call.first_text + 2
    # The upstream pauses 5 s after frame `taken`: the stream is surely live on A while B's
    # request attaches, even on a slow machine; then the rest comes 20 ms apart.
    scenario = f"seed={seed}; tokens={tokens}; delay_ms=20; stall_after={taken}; stall_s=5"
    headers = call.headers(scenario) | {"Idempotency-Key": "k1"}
    with httpx2.stream("POST", a.base_url + call.path, json=call.body, headers=headers,
                       timeout=TIMEOUT) as response:
        assert response.status_code == 200
        stream_id = response.headers["unbroken-stream-id"]
        on_a = FrameReader(response, "openai-chat")
        head = on_a.take(taken)
        assert stream_status(b.base_url, stream_id)["status"] == "streaming"
        attached = httpx2.post(b.base_url + call.path, json=call.body, headers=headers,
                               timeout=TIMEOUT)
        rest_on_a = head + on_a.rest()
    assert attached.status_code == 200, attached.text
    assert attached.headers["unbroken-stream-id"] == stream_id
    assert attached.headers["idempotent-replayed"] == "true"
    assert "unbroken-stream-token" not in attached.headers  # the creator's response had it
    # The whole stream from seq 1, byte for byte what A's own client read.
    on_b = frames_of("openai-chat", attached.content)
    assert [frame.block_id for frame in on_b] == ids(stream_id, 1, total)
    assert read_as_sse(on_b) == read_as_sse(rest_on_a)
    joined = message_of("openai-chat", attached.content)
    assert (joined.text, joined.status, joined.duplicates) == (
        reply_text(seed, tokens), Status.COMPLETED, 0)
    assert (metric(b, "unbroken_idempotent_attaches_total"),
            metric(b, "unbroken_streams_started_total"),
            metric(a, "unbroken_streams_started_total")) == ("1", "0", "1")
    [attach] = [record for record in log_records(b.log) if record.get("event") == "stream.attach"]
    assert (attach["stream_id"], attach["reason"]) == (stream_id, "idempotency_key")

    # The same key with another body, on B: a mistake, refused before anything goes upstream.
    other_body = dict(call.body, messages=[{"role": "user", "content": "something else"}])
    changed = httpx2.post(b.base_url + call.path, json=other_body, headers=headers,
                          timeout=TIMEOUT)
    assert changed.status_code == 422
    assert changed.json() == {"error": {"message": CHANGED, "type": "invalid_request_error",
                                        "param": None, "code": None}}
    # The ended stream is still the key's, on either replica.
    again = httpx2.post(b.base_url + call.path, json=call.body, headers=headers, timeout=TIMEOUT)
    assert again.headers["unbroken-stream-id"] == stream_id
    assert read_as_sse(frames_of("openai-chat", again.content)) == read_as_sse(on_b)
    status = stream_status(b.base_url, stream_id)
    assert (status["status"], status["last_seq"], status["text"], status["upstream_requests"]) == (
        "completed", total, reply_text(seed, tokens), 1)
    assert mock_counts(mock_server) == generations(call)


def test_sigkill_of_a_ends_the_post_resumes_following_on_b_with_the_error_frame(
    replicas: tuple[ProxyProcess, ProxyProcess], mock_server: str
) -> None:
    a, b = replicas
    seed, tokens = 51, 10
    followed: dict[str, tuple[str, int, bytes, bytes, FrameReader]] = {}
    with ExitStack() as stack:
        for index, dialect in enumerate(DIALECTS):
            call = CALLS[dialect]
            cut, taken = call.first_text, call.first_text + 2  # the upstream stalls after taken
            scenario = f"seed={seed + index}; tokens={tokens}; stall_after={taken}; stall_s=30"
            headers = call.headers(scenario) | SSE
            with httpx2.stream("POST", a.base_url + call.path, json=call.body, headers=headers,
                               timeout=TIMEOUT) as response:
                assert response.status_code == 200
                stream_id = response.headers["unbroken-stream-id"]
                head = b"".join(frame.raw for frame in FrameReader(response, dialect).take(cut))
            # The client left A (which keeps the stream) and re-POSTs on B.
            resumed = stack.enter_context(httpx2.stream(
                "POST", b.base_url + call.path, json=call.body, timeout=TIMEOUT,
                headers=headers | {"Last-Event-ID": f"{stream_id}:{cut}"}))
            assert resumed.status_code == 200
            assert resumed.headers["unbroken-stream-id"] == stream_id
            reader = FrameReader(resumed, dialect)
            caught_up = reader.take(taken - cut)
            if dialect != "ollama":
                assert [frame.block_id for frame in caught_up] == ids(stream_id, cut + 1, taken)
            middle = b"".join(frame.raw for frame in caught_up)
            followed[dialect] = (stream_id, taken, head, middle, reader)
        for dialect in DIALECTS:  # each B reader now waits on A's stalled, live stream
            assert stream_status(b.base_url, followed[dialect][0])["status"] == "streaming"
        a.kill()
        # A's lease runs out; B settles each stream and its reader gets the end, then the body
        # ends (the read timeout bounds each wait).
        tails = {dialect: followed[dialect][4].rest() for dialect in DIALECTS}

    for index, dialect in enumerate(DIALECTS):
        call = CALLS[dialect]
        stream_id, taken, head, middle, _reader = followed[dialect]
        status = stream_status(b.base_url, stream_id)
        assert (status["status"], status["last_seq"], status["text"], status["error"]) == (
            "interrupted", taken + 1, call.text_after(seed + index, tokens, taken),
            {"type": "proxy_restarted", "message": LEASE_EXPIRED})
        end = error_frame(dialect, taken + 1, ended_mark("proxy_restarted", LEASE_EXPIRED),
                          taken if dialect == "openai-responses" else None)
        if dialect == "ollama":
            assert [line.raw.rstrip(b"\r\n") for line in tails[dialect]] == [end.data]
        else:
            assert read_as_sse(tails[dialect]) == [sse_frame(stream_id, end)]
        # What the client built from both responses: the prefix, then the proxy's end, read as
        # the status it journaled (interrupted), not as the provider's failure.
        body_on_b = middle + b"".join(frame.raw for frame in tails[dialect])
        # NDJSON has no ids (a line's seq is its position): one body, as the client joins it.
        joined = (message_of(dialect, head + body_on_b) if dialect == "ollama"
                  else message_of(dialect, head, body_on_b))
        assert (joined.text, joined.status, joined.duplicates) == (
            call.text_after(seed + index, tokens, taken), Status.INTERRUPTED, 0)
        assert isinstance(joined.error, ProxyInterrupted)
        assert (joined.error.code, joined.error.status) == ("proxy_restarted", "interrupted")
    recovered = sorted(record["stream_id"] for record in log_records(b.log)
                       if record.get("event") == "stream.recovered")
    assert recovered == sorted(stream_id for stream_id, *_ in followed.values())
    assert mock_counts(mock_server) == generations(*CALLS.values())


def test_a_background_stream_left_by_a_sigkilled_a_is_reattached_upstream_on_b(
    replicas: tuple[ProxyProcess, ProxyProcess], mock_server: str
) -> None:
    a, b = replicas
    call = CALLS["openai-responses"]
    seed, tokens, taken = 22, 10, 8
    total = call.total(tokens)
    scenario = f"seed={seed}; tokens={tokens}; stall_after={taken}; stall_s=30"
    with httpx2.stream("POST", a.base_url + call.path, json=BACKGROUND, timeout=TIMEOUT,
                       headers=call.headers(scenario)) as response:
        assert response.status_code == 200
        stream_id = response.headers["unbroken-stream-id"]
        head = FrameReader(response, "openai-responses").take(taken)
        a.kill()
    # Continuable: interrupted with its reason, and no error frame journaled.
    settled = status_when_settled(b, stream_id)
    assert (settled["status"], settled["last_seq"], settled["error"]["type"]) == (
        "interrupted", taken, "proxy_restarted")
    assert settled["provider_id"].startswith("resp_")

    # The owner re-POSTs on B with its own credential: B continues the response upstream
    # (GET /v1/responses/{id}?stream=true&starting_after=...) and serves the rest.
    resume = {"Last-Event-ID": f"{stream_id}:{taken}"}
    resumed = httpx2.post(b.base_url + call.path, json=BACKGROUND, timeout=TIMEOUT,
                          headers=call.headers(scenario) | resume)
    assert resumed.status_code == 200, resumed.text
    assert resumed.headers["unbroken-stream-id"] == stream_id
    rest = frames_of("openai-responses", resumed.content)
    assert [frame.block_id for frame in rest] == ids(stream_id, taken + 1, total)
    # The provider's numbering goes on too: sequence_number 0 .. total-1 across both bodies.
    assert provider_seqs(head + rest) == list(range(total))
    head_body = b"".join(frame.raw for frame in head)
    joined = message_of("openai-responses", head_body, resumed.content)
    assert (joined.text, joined.status, joined.duplicates) == (
        reply_text(seed, tokens), Status.COMPLETED, 0)
    assert rest[-1].event == "response.completed"

    status = stream_status(b.base_url, stream_id)
    # Two upstream requests for the one stream: A's POST that created the response, and B's
    # GET ... starting_after that continued it (a re-attach adds one to the journaled count).
    assert (status["status"], status["last_seq"], status["text"], status["upstream_requests"],
            status["error"]) == ("completed", total, reply_text(seed, tokens), 2, None)
    [reattach] = [record for record in log_records(b.log)
                  if record.get("event") == "stream.reattach"]
    assert (reattach["stream_id"], reattach["seq"]) == (stream_id, str(taken))
    assert (metric(b, "unbroken_upstream_resumes_total"), metric(b, "unbroken_resumes_total"),
            metric(b, "unbroken_streams_started_total")) == ("1", "1", "0")
    # One generation; the mock's one resume is B's GET.
    assert mock_counts(mock_server) == {
        "generations": {"/v1/responses": 1}, "resumes": {"/v1/responses": 1}}


# -- races between replicas (each was a bug this file found) ---------------------------------


def test_an_owner_resume_on_b_before_a_dead_lease_ran_out_does_not_end_silently(
    replicas: tuple[ProxyProcess, ProxyProcess], mock_server: str
) -> None:
    a, b = replicas
    call = CALLS["openai-responses"]
    seed, tokens, taken = 23, 10, 8
    total = call.total(tokens)
    scenario = f"seed={seed}; tokens={tokens}; stall_after={taken}; stall_s=30"
    with httpx2.stream("POST", a.base_url + call.path, json=BACKGROUND, timeout=TIMEOUT,
                       headers=call.headers(scenario)) as response:
        stream_id = response.headers["unbroken-stream-id"]
        head = FrameReader(response, "openai-responses").take(taken)
        a.kill()
    # At once: A renewed its lease at most 0.5 s ago, so it runs for 1.5 s more; but A ran on
    # this host and its process is gone (journal/holder.py), so B settles the stream at once,
    # continuable, and this owner's resume re-attaches it upstream: the rest, no silent end.
    resume = {"Last-Event-ID": f"{stream_id}:{taken}"}
    resumed = httpx2.post(b.base_url + call.path, json=BACKGROUND, timeout=TIMEOUT,
                          headers=call.headers(scenario) | resume)
    assert resumed.status_code == 200
    rest = frames_of("openai-responses", resumed.content)
    assert [frame.block_id for frame in rest] == ids(stream_id, taken + 1, total)
    joined = message_of("openai-responses", b"".join(frame.raw for frame in head),
                        resumed.content)
    assert (joined.text, joined.status) == (reply_text(seed, tokens), Status.COMPLETED)


def slow_headers(app: ASGIApp, seconds: float) -> ASGIApp:
    """``app`` answering every POST ``seconds`` late (before its status line)."""
    async def delayed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            await asyncio.sleep(seconds)
        await app(scope, receive, send)
    return delayed


def test_one_key_posted_on_a_and_b_at_once_makes_one_generation(
    redis_url: str, tmp_path: Path
) -> None:
    call = CALLS["openai-chat"]
    seed, tokens = 17, 6
    headers = call.headers(f"seed={seed}; tokens={tokens}") | {"Idempotency-Key": "twin-1"}
    barrier = threading.Barrier(2)

    def post(proxy: ProxyProcess) -> tuple[str, str]:
        barrier.wait(timeout=10)
        response = httpx2.post(proxy.base_url + call.path, json=call.body, headers=headers,
                               timeout=TIMEOUT)
        assert response.status_code == 200
        return (response.headers["unbroken-stream-id"],
                message_of("openai-chat", response.content).text)

    # The upstream's 0.5 s before its headers: both requests are surely in that window together
    # (a load balancer spreading a double click over two replicas).
    with serve_in_thread(slow_headers(create_mock(), 0.5)) as upstream, ExitStack() as stack:
        with ThreadPoolExecutor(2) as pool:
            started = list(pool.map(lambda name: stack.enter_context(ProxyProcess.start(
                upstream, redis_url, tmp_path / f"{name}.log", *LEASE)), "ab"))
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(post, started))
        counts = mock_counts(upstream)
    assert [text for _, text in answers] == [reply_text(seed, tokens)] * 2
    assert counts == generations(call)
    assert answers[0][0] == answers[1][0]


def ended_mark(code: str, message: str) -> ProxyMark:
    """The mark of a frame the proxy journaled to end a stream."""
    status = "cancelled" if code == "stream_cancelled" else "interrupted"
    return ProxyMark(code=code, status=status, resumable=False, message=message)
