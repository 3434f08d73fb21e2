"""``StreamSession``: the client's decisions without I/O. Each test plays a driver by hand (times
are passed in), so retries, resumes and deadlines are checked to the exact second."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from unbroken.client import Deadlines, Retry, read_capture
from unbroken.client.capture import CANCELLED, CaptureWriter
from unbroken.client.policy import ResumeMode
from unbroken.client.session import Request, StreamSession
from unbroken.errors import (
    ContentTypeError,
    FirstEventTimeout,
    IdleTimeout,
    Interrupted,
    ProviderError,
    StreamError,
    TotalTimeout,
    TransportError,
    UpstreamStatusError,
)
from unbroken.events import TextDelta
from unbroken.finish import Status

URL = "http://127.0.0.1:1/v1/chat/completions"
SSE = {"content-type": "text/event-stream"}


def session(
    dialect: str = "openai-chat",
    *,
    resume: ResumeMode = "auto",
    retry: Retry | None = None,
    deadlines: Deadlines | None = None,
    content: bytes | None = b'{"stream": true}',
    url: str = URL,
    capture: CaptureWriter | None = None,
) -> StreamSession:
    return StreamSession(
        "post", url, dialect=dialect, content=content, headers={"authorization": "Bearer k"},
        retry=retry or Retry(attempts=3, backoff=0.0), resume=resume,
        deadlines=deadlines or Deadlines(), trace=True, started=0.0, capture=capture,
        rng=random.Random(0),
    )


def chunk(content: str | None = None, *, id: str | None = None, retry: int | None = None,
          error: dict[str, Any] | None = None) -> bytes:
    payload: dict[str, Any] = (
        {"error": error} if error is not None
        else {"choices": [{"index": 0, "delta": {} if content is None else {"content": content},
                           "finish_reason": None}]}
    )
    lines = [] if id is None else [f"id: {id}"]
    if retry is not None:
        lines.append(f"retry: {retry}")
    lines.append("data: " + json.dumps(payload))
    return ("\n".join(lines) + "\n\n").encode()


def broken(s: StreamSession, now: float) -> float | None:
    """What a driver does when a body breaks: the receiver sees the end, then the failure."""
    s.on_eof(now)
    assert not s.done
    return s.on_failure(TransportError("cut"), now)


def texts(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_a_request_carries_the_body_and_headers() -> None:
    s = session()
    request = s.next_request(0.0)
    assert request == Request("POST", URL, {"authorization": "Bearer k"}, b'{"stream": true}',
                              "first")
    assert s.connections == 1


def test_bad_arguments_are_refused_up_front() -> None:
    with pytest.raises(ValueError, match="resume must be one of"):
        session(resume="always")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nope"):
        session("nope")


# -- what a failure leads to --------------------------------------------------------------------


def test_the_sse_retry_field_sets_the_pause_before_a_fresh_attempt() -> None:
    s = session(retry=Retry(backoff=30.0))
    s.next_request(0.0)
    s.on_response(200, SSE)
    assert texts(s.receive(chunk(retry=250), 0.1)) == ""  # an empty delta: nothing visible
    assert broken(s, 0.2) == 0.25
    request = s.next_request(0.5)
    assert request.kind == "retry"
    assert "Last-Event-ID" not in request.headers


@pytest.mark.parametrize(
    ("headers", "delay"),
    [({"retry-after": "2"}, 2.0), ({"retry-after": "2", "retry-after-ms": "125"}, 0.125),
     ({}, 0.0)],
)
def test_a_429_waits_as_long_as_the_server_says(headers: dict[str, str], delay: float) -> None:
    s = session()
    s.next_request(0.0)
    with pytest.raises(UpstreamStatusError) as caught:
        s.on_response(429, headers, b'{"error": "slow down"}')
    assert caught.value.status == 429
    assert caught.value.body == '{"error": "slow down"}'
    assert s.on_failure(caught.value, 0.1) == delay
    assert s.next_request(0.2).kind == "retry"


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_a_client_error_is_final(status: int) -> None:
    s = session()
    s.next_request(0.0)
    with pytest.raises(UpstreamStatusError) as caught:
        s.on_response(status, {}, b"no")
    assert s.on_failure(caught.value, 0.1) is None
    assert s.done
    assert s.message.error is caught.value


def test_a_server_asking_for_more_than_a_minute_is_not_waited_for() -> None:
    s = session()
    s.next_request(0.0)
    with pytest.raises(UpstreamStatusError) as caught:
        s.on_response(503, {"retry-after": "61"})
    assert s.on_failure(caught.value, 0.1) is None
    assert s.done


def test_no_retry_that_would_end_after_the_total_deadline() -> None:
    s = session(deadlines=Deadlines(total=5.0))
    s.next_request(0.0)
    with pytest.raises(UpstreamStatusError) as caught:
        s.on_response(429, {"retry-after": "1"})
    assert s.on_failure(caught.value, 3.9) == 1.0
    s.next_request(4.9)
    with pytest.raises(UpstreamStatusError) as again:
        s.on_response(429, {"retry-after": "1"})
    assert s.on_failure(again.value, 4.0) is None  # 4.0 + 1.0 reaches 5.0


def test_attempts_count_failures_in_a_row_without_progress() -> None:
    s = session(resume="sse", retry=Retry(attempts=2, backoff=0.0, budget=None))
    s.next_request(0.0)
    s.on_response(200, SSE)
    assert texts(s.receive(chunk("a", id="1") + chunk("b", id="2"), 0.1)) == "ab"
    assert broken(s, 0.2) == 0.0
    request = s.next_request(0.3)
    assert (request.kind, request.headers["Last-Event-ID"]) == ("resume", "2")
    s.on_response(200, SSE)
    # The server repeats frame 2: never shown twice.
    assert texts(s.receive(chunk("b", id="2") + chunk("c", id="3"), 0.4)) == "c"
    assert broken(s, 0.5) == 0.0  # progress: the count starts again
    assert s.next_request(0.6).headers["Last-Event-ID"] == "3"
    s.on_response(200, SSE)
    assert broken(s, 0.7) == 0.0  # first failure without progress
    s.next_request(0.8)
    s.on_response(200, SSE)
    assert broken(s, 0.9) is None  # second in a row: attempts exhausted
    assert s.done
    assert s.connections == 4
    assert s.message.status is Status.INTERRUPTED
    assert s.message.text == "abc"
    assert s.message.duplicates == 1
    with pytest.raises(Interrupted) as caught:
        s.finish(raise_on_error=True)
    assert caught.value.message is s.message
    assert isinstance(caught.value.__cause__, TransportError)


def test_the_default_budget_keeps_resuming_through_a_restart() -> None:
    # A proxy restarting for 9 s: every connection is refused. Retry() (3 attempts, budget
    # 15 s) goes on past its third failure, each pause capped and jittered, and the resume
    # after the restart continues the stream.
    s = session(resume="sse", retry=Retry(backoff=0.5, max_backoff=2.0))
    s.next_request(0.0)
    s.on_response(200, SSE)
    assert texts(s.receive(chunk("a", id="1"), 0.1)) == "a"
    now, failures = 1.0, 0
    delay = broken(s, now)
    while now < 10.0:
        assert delay is not None and 0.0 < delay <= 2.0
        now += delay
        failures += 1
        assert s.next_request(now).headers["Last-Event-ID"] == "1"
        if now >= 10.0:
            break
        delay = s.on_failure(TransportError("connection refused"), now)
    assert failures >= 5  # more than `attempts`, fewer than a fast loop would make
    s.on_response(200, SSE)
    assert texts(s.receive(chunk("b", id="2"), now + 0.1)) == "b"
    assert s.message.text == "ab"


@pytest.mark.parametrize("budget", [15.0, 4.0])
def test_the_budget_is_spent_then_the_stream_is_interrupted(budget: float) -> None:
    s = session(resume="sse", retry=Retry(backoff=1.0, max_backoff=8.0, budget=budget))
    s.next_request(0.0)
    s.on_response(200, SSE)
    assert texts(s.receive(chunk("a", id="1"), 0.1)) == "a"
    now = 1.0
    delay = broken(s, now)  # the first failure: the budget starts here
    attempts = 1
    while delay is not None:
        assert attempts < 50
        now += delay
        s.next_request(now)
        attempts += 1
        delay = s.on_failure(TransportError("connection refused"), now)
    # The last attempt is made as the budget ends (its pause shortened), not after it.
    assert now == pytest.approx(1.0 + budget)
    assert s.message.status is Status.INTERRUPTED
    assert s.message.text == "a"


def test_without_identity_a_stream_that_showed_text_is_never_replayed() -> None:
    s = session()
    s.next_request(0.0)
    s.on_response(200, SSE)
    s.receive(chunk("a", id="1"), 0.1)  # numeric ids alone are not an identity for "auto"
    assert broken(s, 0.2) is None
    assert s.connections == 1
    assert s.message.status is Status.INTERRUPTED
    s.finish(raise_on_error=False)  # no raise
    assert s.message.error is not None and str(s.message.error) == "cut"


def test_an_unbroken_stream_id_resumes_with_its_own_event_ids() -> None:
    s = session()
    s.next_request(0.0)
    s.on_response(200, {**SSE, "unbroken-stream-id": "s1"})
    s.receive(chunk("a", id="s1:1") + chunk("b", id="s1:2"), 0.1)
    assert broken(s, 0.2) == 0.0
    request = s.next_request(0.3)
    assert (request.kind, request.method, request.url) == ("resume", "POST", URL)
    assert request.headers["Last-Event-ID"] == "s1:2"
    assert "resumed" not in [w.code for w in s.message.warnings]
    s.on_response(200, SSE)
    assert [w.code for w in s.message.warnings].count("resumed") == 1


def responses_event(kind: str, seq: int, **fields: Any) -> bytes:
    data = json.dumps({"type": kind, "sequence_number": seq, **fields})
    return f"event: {kind}\ndata: {data}\n\n".encode()


CREATED = responses_event("response.created", 0, response={
    "id": "resp_1", "object": "response", "status": "in_progress", "model": "m", "output": []})


def delta(seq: int, text: str) -> bytes:
    return responses_event("response.output_text.delta", seq, item_id="msg_1", output_index=0,
                           content_index=0, delta=text)


def test_a_background_response_resumes_with_a_get_after_its_last_sequence_number() -> None:
    s = session("openai-responses", url="http://h/v1/responses",
                content=b'{"stream": true, "background": true}')
    s.headers["content-type"] = "application/json"
    s.next_request(0.0)
    s.on_response(200, SSE)
    assert texts(s.receive(CREATED + delta(1, "Hi") + delta(2, "!"), 0.1)) == "Hi!"
    assert broken(s, 0.2) == 0.0
    request = s.next_request(0.3)
    assert request == Request("GET", "http://h/v1/responses/resp_1?stream=true&starting_after=2",
                              {"authorization": "Bearer k"}, None, "resume")


def test_a_foreground_response_is_not_resumed() -> None:
    s = session("openai-responses", url="http://h/v1/responses")
    s.next_request(0.0)
    s.on_response(200, SSE)
    s.receive(CREATED + delta(1, "Hi"), 0.1)
    assert broken(s, 0.2) is None


def test_a_retryable_error_before_any_text_is_retried_as_a_new_generation() -> None:
    s = session(deadlines=Deadlines(first_event=2.0, idle=5.0))
    s.next_request(0.0)
    s.on_response(200, SSE)
    with pytest.raises(ProviderError) as caught:
        s.receive(chunk(error={"type": "server_error", "message": "boom"}), 0.5)
    assert caught.value.retryable
    assert s.on_failure(caught.value, 0.6) == 0.0
    assert s.next_request(10.0).kind == "retry"
    s.on_response(200, SSE)
    # A new generation waits for its first event again (not for the idle deadline).
    assert s.next_deadline() == 12.0


def test_a_provider_error_is_never_resumed() -> None:
    s = session(resume="sse")
    s.next_request(0.0)
    s.on_response(200, SSE)
    s.receive(chunk("a", id="1"), 0.1)
    # After text, a retryable error event is recorded, not raised: the stream ends failed.
    assert s.receive(chunk(error={"type": "server_error", "message": "x"}, id="2"), 0.2) != []
    s.on_eof(0.3)
    assert s.done
    assert s.message.status is Status.FAILED
    with pytest.raises(ProviderError) as caught:
        s.finish(raise_on_error=True)
    assert caught.value.message is s.message


# -- deadlines ----------------------------------------------------------------------------------


def test_the_first_event_deadline_counts_from_the_request() -> None:
    s = session(deadlines=Deadlines(first_event=2.0, idle=5.0))
    s.next_request(10.0)
    s.on_response(200, SSE)
    assert s.next_deadline() == 12.0
    assert s.time_left(11.5) == 0.5
    s.check_deadlines(11.999)
    with pytest.raises(FirstEventTimeout) as caught:
        s.check_deadlines(12.0)
    assert caught.value.seconds == 2.0
    assert isinstance(s.overdue(), FirstEventTimeout)


def test_keep_alives_do_not_reset_the_idle_deadline() -> None:
    s = session(deadlines=Deadlines(first_event=2.0, idle=5.0))
    s.next_request(10.0)
    s.on_response(200, SSE)
    s.receive(chunk("a"), 11.0)
    assert s.next_deadline() == 16.0
    assert s.receive(b": keep-alive\n\n", 15.9) == []
    with pytest.raises(IdleTimeout) as caught:
        s.receive(b": keep-alive\n\n", 16.0)
    assert caught.value.seconds == 5.0


def test_content_resets_the_idle_deadline() -> None:
    s = session(deadlines=Deadlines(first_event=2.0, idle=5.0))
    s.next_request(10.0)
    s.on_response(200, SSE)
    s.receive(chunk("a"), 11.0)
    s.receive(chunk("b"), 15.0)
    assert s.next_deadline() == 20.0


def test_the_total_deadline_is_the_nearest_when_it_comes_first() -> None:
    s = session(deadlines=Deadlines(first_event=60.0, idle=30.0, total=3.0))
    s.next_request(1.0)
    assert s.next_deadline() == 3.0
    with pytest.raises(TotalTimeout):
        s.check_deadlines(3.0)


def test_no_deadline_at_all() -> None:
    s = session(deadlines=Deadlines(first_event=None, idle=None, total=None))
    s.next_request(0.0)
    assert s.next_deadline() is None
    assert s.time_left(5.0) is None
    assert s.overdue() is None
    assert s.socket_read_timeout() is None


def test_the_socket_read_timeout_is_the_longest_content_deadline() -> None:
    assert session(deadlines=Deadlines(first_event=2.0, idle=5.0)).socket_read_timeout() == 5.0
    assert session(deadlines=Deadlines(first_event=9.0, idle=5.0, total=4.0)
                   ).socket_read_timeout() == 4.0


# -- media types --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "content_type", "accepted"),
    [
        ("openai-chat", "text/event-stream", True),
        ("openai-chat", "Text/Event-Stream; charset=utf-8", True),
        ("openai-chat", "application/json", False),
        ("gemini", "application/json", False),
        ("ollama", "application/x-ndjson", True),
        ("ollama", "application/json; charset=utf-8", True),
        ("ollama", "text/event-stream", False),
        ("auto", "text/event-stream", True),
        ("auto", "application/x-ndjson", True),
        ("auto", "text/html", False),
    ],
)
def test_the_media_type_must_be_the_dialects(
    dialect: str, content_type: str, accepted: bool
) -> None:
    s = session(dialect)
    s.next_request(0.0)
    if accepted:
        s.on_response(200, {"content-type": content_type})
        return
    with pytest.raises(ContentTypeError) as caught:
        s.on_response(200, {"content-type": content_type})
    assert caught.value.content_type == content_type.split(";")[0].lower()
    assert s.on_failure(caught.value, 0.1) is None  # asking again gives the same answer


# -- the end ------------------------------------------------------------------------------------


def test_cancel_ends_the_message_and_the_capture(tmp_path: Path) -> None:
    writer = CaptureWriter(tmp_path / "c.jsonl", method="POST", url=URL, dialect="openai-chat",
                           started=0.0)
    s = session(capture=writer)
    s.next_request(0.0)
    s.on_response(200, SSE)
    s.receive(chunk("a"), 0.1)
    s.cancel()
    assert s.done
    assert s.message.status is Status.CANCELLED
    capture = read_capture(tmp_path / "c.jsonl")
    assert (capture.end, capture.error) == ("error", CANCELLED)
    assert capture.connections[0].reads == [(0.1, chunk("a"))]


def test_finish_raises_interrupted_that_is_also_the_deadline() -> None:
    s = session(deadlines=Deadlines(first_event=1.0), retry=Retry(attempts=1, budget=None))
    s.next_request(0.0)
    s.on_response(200, SSE)
    with pytest.raises(FirstEventTimeout) as caught:
        s.check_deadlines(1.0)
    assert s.on_failure(caught.value, 1.0) is None
    with pytest.raises(Interrupted) as raised:
        s.finish(raise_on_error=True)
    error = raised.value
    assert isinstance(error, FirstEventTimeout)  # `except FirstEventTimeout` catches it too
    assert type(error).__name__ == "Interrupted[FirstEventTimeout]"
    assert error.__cause__ is caught.value
    assert (error.seconds, error.message) == (1.0, s.message)
    assert str(error) == ("the stream ended without a finish reason (no content event within "
                          "1.0 s); 0 characters of partial text kept")
    assert s.message.status is Status.INTERRUPTED
    assert s.message.error is caught.value  # the message keeps the cause itself


def test_an_error_is_a_stream_error() -> None:
    # Callers catch unbroken's errors, never an HTTP library's.
    for error in (TransportError, UpstreamStatusError, ContentTypeError, IdleTimeout,
                  FirstEventTimeout, TotalTimeout, ProviderError, Interrupted):
        assert issubclass(error, StreamError)
