"""Frames the proxy writes itself, read by unbroken's clients through a real proxy and the mock.

Every dialect, ``unbroken.stream`` and ``unbroken.astream``: an upstream that broke after content
ends the client's message ``interrupted`` with the exact prefix (``ProxyInterrupted``), as the
proxy journaled it, never the provider's ``failed``; one that broke after the provider answered
but before content starts a second generation that the message counts and explains, unless
``Retry(after_response=False)`` forbids it; a stream cancelled at the proxy ends ``cancelled``.
Generations are counted by the mock, exactly. (The SDK wrappers: ``test_proxy_sdk_wrappers.py``;
a proxy restart and a lost journal: ``test_hardening_recovery.py``,
``test_proxy_journal_health.py``.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from tests.integration.test_proxy_support import (
    CALLS,
    DIALECTS,
    Call,
    mock_counts,
    running_proxy,
    stream_status,
)

from unbroken.client import Retry, astream, stream
from unbroken.errors import Interrupted, ProxyInterrupted, StreamError
from unbroken.events import TextDelta
from unbroken.finish import Status
from unbroken.message import Message
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

SEED, TOKENS = 5, 8
FLAVOURS = ("sync", "async")
FAST = Retry(backoff=0.01)


@pytest.fixture(scope="module")
def proxy(mock_server_session: str) -> Iterator[str]:
    with running_proxy(mock_server_session) as (base_url, _app):
        yield base_url


@dataclass
class Read:
    message: Message
    error: StreamError | None
    connections: int


class LaterAttempts:
    """Rewrites the mock's scenario on every request after the first: only the first
    generation meets the fault."""

    def __init__(self, later: str) -> None:
        self.later = later
        self.requests = 0

    def rewrite(self, request: httpx2.Request) -> None:
        self.requests += 1
        if self.requests > 1:
            request.headers["unbroken-mock"] = self.later


class SyncLater(httpx2.HTTPTransport):
    def __init__(self, later: LaterAttempts) -> None:
        super().__init__()
        self.later = later

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.later.rewrite(request)
        return super().handle_request(request)


class AsyncLater(httpx2.AsyncHTTPTransport):
    def __init__(self, later: LaterAttempts) -> None:
        super().__init__()
        self.later = later

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.later.rewrite(request)
        return await super().handle_async_request(request)


def read(flavour: str, proxy: str, call: Call, scenario: str, *,
         later: LaterAttempts | None = None, retry: Retry = FAST,
         on_text: Any = None) -> Read:
    """Read the stream to its end with ``unbroken.stream`` or ``unbroken.astream``."""
    options: dict[str, Any] = {"dialect": call.dialect, "json": call.body, "retry": retry,
                               "headers": call.headers(scenario)}
    if flavour == "sync":
        http = httpx2.Client(transport=SyncLater(later or LaterAttempts(scenario)))
        with http, stream("POST", proxy + call.path, client=http, **options) as s:
            try:
                for event in s:
                    if on_text is not None and event.__class__ is TextDelta:
                        on_text(s.message)
            except StreamError as err:
                return Read(s.message, err, s.connections)
            return Read(s.message, None, s.connections)

    async def main() -> Read:
        http = httpx2.AsyncClient(transport=AsyncLater(later or LaterAttempts(scenario)))
        async with http, astream("POST", proxy + call.path, client=http, **options) as s:
            try:
                async for event in s:
                    if on_text is not None and event.__class__ is TextDelta:
                        await asyncio.to_thread(on_text, s.message)
            except StreamError as err:
                return Read(s.message, err, s.connections)
            return Read(s.message, None, s.connections)

    return asyncio.run(main())


def newest_stream(proxy: str, call: Call) -> dict[str, Any]:
    listed = httpx2.get(proxy + "/v1/streams", headers=call.headers(""), timeout=10)
    newest: dict[str, Any] = listed.json()["streams"][0]
    return newest


def generations(mock: str, call: Call) -> dict[str, int]:
    return mock_counts(mock)["generations"]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_upstream_cut_after_content_ends_interrupted_with_the_exact_prefix(
    proxy: str, mock_server: str, dialect: str, flavour: str
) -> None:
    call = CALLS[dialect]
    taken = call.first_text + 2  # two text deltas, then the upstream connection drops
    got = read(flavour, proxy, call, f"seed={SEED}; tokens={TOKENS}; drop_after={taken}")
    message = got.message
    assert (message.status, message.text, message.last_seq, message.finish_reason) == (
        Status.INTERRUPTED, call.text_after(SEED, TOKENS, taken), taken + 1, None)
    assert len(message.text) > 0
    # Raised as Interrupted and as the proxy's word; the message's error is the proxy's.
    assert isinstance(got.error, Interrupted) and isinstance(got.error, ProxyInterrupted)
    assert got.error.message is message
    error = message.error
    assert isinstance(error, ProxyInterrupted)
    assert (error.code, error.status) == ("upstream_interrupted", "interrupted")
    assert str(error).startswith("unbroken proxy: the upstream stream broke before it finished")
    # Nothing to read on and content was shown: no resume, no second generation.
    assert (got.connections, message.generations, message.earlier_response_ids) == (1, 1, [])
    assert generations(mock_server, call) == {call.path.split("?")[0]: 1}
    # The client's status is the proxy's.
    listed = newest_stream(proxy, call)
    assert (listed["status"], listed["last_seq"]) == ("interrupted", taken + 1)
    assert stream_status(proxy, listed["id"])["text"] == message.text


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_cut_before_content_starts_a_second_generation_and_says_why(
    proxy: str, mock_server: str, dialect: str, flavour: str
) -> None:
    call = CALLS[dialect]
    answered = call.first_text - 1  # the provider's start frames came, no text yet
    healthy = f"seed={SEED}; tokens={TOKENS}"
    got = read(flavour, proxy, call, f"{healthy}; drop_after={answered}",
               later=LaterAttempts(healthy))
    message = got.message
    assert got.error is None
    assert (message.status, message.text) == (Status.COMPLETED, reply_text(SEED, TOKENS))
    assert (got.connections, message.generations) == (2, 2)
    assert generations(mock_server, call) == {call.path.split("?")[0]: 2}
    # The first generation's response id (the mock's ids repeat for the same seed); Gemini's
    # and Ollama's first generation sent no frame before the cut, so it had none.
    assert message.earlier_response_ids == ([message.id] if answered else [None])
    [regenerated] = [w.detail for w in message.warnings if w.code == "regenerated"]
    assert regenerated.startswith(f"generation 2 started: generation 1 (response id "
                                  f"{message.earlier_response_ids[0]}) was answered, then "
                                  "ProxyInterrupted: unbroken proxy: the upstream stream broke")
    assert "ended interrupted with no content), before any content" in regenerated
    assert "the proxy's stream ub_" in regenerated


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_after_response_false_forbids_the_second_generation(
    proxy: str, mock_server: str, dialect: str, flavour: str
) -> None:
    call = CALLS[dialect]
    answered = call.first_text - 1
    healthy = f"seed={SEED}; tokens={TOKENS}"
    got = read(flavour, proxy, call, f"{healthy}; drop_after={answered}",
               later=LaterAttempts(healthy), retry=Retry(backoff=0.01, after_response=False))
    message = got.message
    assert (message.status, message.text, message.last_seq) == (
        Status.INTERRUPTED, "", answered + 1)
    assert isinstance(got.error, ProxyInterrupted) and isinstance(got.error, Interrupted)
    assert (got.connections, message.generations, message.earlier_response_ids) == (1, 1, [])
    assert generations(mock_server, call) == {call.path.split("?")[0]: 1}
    assert [w.detail for w in message.warnings if w.code == "no_regenerate"] == [
        "not retried: the provider had answered and Retry(after_response=False) forbids a "
        "second generation"]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_stream_cancelled_at_the_proxy_ends_cancelled(
    proxy: str, mock_server: str, dialect: str, flavour: str
) -> None:
    call = CALLS[dialect]
    taken = call.first_text + 1  # two text deltas, then the upstream stalls
    cancelled: list[int] = []

    def cancel_once(message: Message) -> None:
        if len(message.text) == len(call.text_after(SEED, TOKENS, taken)) and not cancelled:
            stream_id = newest_stream(proxy, call)["id"]
            answer = httpx2.post(f"{proxy}/v1/streams/{stream_id}/cancel",
                                 headers=call.headers(""), timeout=10)
            cancelled.append(answer.status_code)

    got = read(flavour, proxy, call, f"seed={SEED}; tokens={TOKENS}; stall_after={taken}; "
               "stall_s=30", on_text=cancel_once)
    message = got.message
    assert cancelled == [200]
    assert (message.status, message.text, message.last_seq, got.error) == (
        Status.CANCELLED, call.text_after(SEED, TOKENS, taken), taken + 1, None)
    assert got.connections == 1
    assert [w.code for w in message.warnings if w.code.startswith("proxy")] == ["proxy_end"]
    assert newest_stream(proxy, call)["status"] == "cancelled"
    assert generations(mock_server, call) == {call.path.split("?")[0]: 1}
