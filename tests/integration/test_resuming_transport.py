"""ResumingTransport with httpx2 alone: a real proxy, the real mock, a TCP fault relay between.

Every dialect's streaming POST is broken on its way from the proxy (reset inside a UTF-8
character, reset inside a frame, half-close, a stall longer than the idle deadline) and read
through ``http_client()``: the caller gets the exact body of an unbroken stream, whole frames at
a time, from one generation. The same faults without the transport: httpx2 raises, as today.
"""

from __future__ import annotations

import httpx2
import pytest
from tests.fault_relay import Cut, Fault
from tests.integration.resuming_support import (
    AT,
    BREAKS,
    DEADLINES,
    FAULTS,
    KIND,
    RETRY,
    SCENARIO,
    SEED,
    TOKENS,
    assert_whole_frames,
    generations,
    proxy_url,
    relay_to,
)
from tests.integration.test_proxy_support import (
    CALLS,
    DIALECTS,
    OLLAMA_GENERATE,
    Call,
    frames_of,
)

from unbroken import async_http_client, http_client, parse
from unbroken.finish import Status
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration
__all__ = ["proxy_url"]  # a fixture, used by name

# Gemini's POST carries ids only when it accepts text/event-stream; google-genai does not.
VARIANTS = [(d, None) for d in DIALECTS] + [("gemini", "text/event-stream")]


def headers_of(call: Call, accept: str | None) -> dict[str, str]:
    headers = call.headers(SCENARIO)
    if accept is not None:
        headers["accept"] = accept
    return headers


def read_through(client: httpx2.Client, url: str, call: Call, accept: str | None
                 ) -> list[bytes]:
    with client.stream("POST", url + call.path, json=call.body,
                       headers=headers_of(call, accept)) as response:
        assert response.status_code == 200
        return list(response.iter_raw())


def assert_exact(dialect: str, pieces: list[bytes]) -> None:
    assert_whole_frames(pieces)
    message = parse(pieces, dialect=dialect)
    assert message.text == reply_text(SEED, TOKENS)
    assert message.status is Status.COMPLETED


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize(("dialect", "accept"), VARIANTS)
def test_a_broken_body_continues_exactly_from_one_generation(
    proxy_url: str, mock_server: str, dialect: str, accept: str | None, fault: str
) -> None:
    call = CALLS[dialect]
    with relay_to(proxy_url, FAULTS[fault]) as relay, http_client(
        retry=RETRY, deadlines=DEADLINES, timeout=10
    ) as client:
        pieces = read_through(client, relay.url, call, accept)
        stats = relay.stats()
    assert_exact(dialect, pieces)
    assert stats.faults == {KIND[fault]: 1}
    # The POST, then one resume for a break; nothing more for a trickle.
    assert stats.connections == (2 if fault in BREAKS else 1)
    assert generations(mock_server) == 1


def test_ollama_generate_continues_too(proxy_url: str, mock_server: str) -> None:
    with relay_to(proxy_url, FAULTS["reset-mid-frame"]) as relay, http_client(
        retry=RETRY, deadlines=DEADLINES, timeout=10
    ) as client:
        pieces = read_through(client, relay.url, OLLAMA_GENERATE, None)
        assert relay.stats().connections == 2
    assert_exact("ollama", pieces)
    assert generations(mock_server) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("fault", BREAKS)
@pytest.mark.parametrize(("dialect", "accept"), VARIANTS)
async def test_the_async_client_continues_the_same_way(
    proxy_url: str, mock_server: str, dialect: str, accept: str | None, fault: str
) -> None:
    call = CALLS[dialect]
    with relay_to(proxy_url, FAULTS[fault]) as relay:
        async with async_http_client(retry=RETRY, deadlines=DEADLINES, timeout=10) as client:
            async with client.stream(
                "POST", relay.url + call.path, json=call.body,
                headers=headers_of(call, accept),
            ) as response:
                assert response.status_code == 200
                pieces = [piece async for piece in response.aiter_raw()]
        assert (relay.stats().faults, relay.stats().connections) == ({KIND[fault]: 1}, 2)
    assert_exact(dialect, pieces)
    assert generations(mock_server) == 1


BASELINE = {
    "reset-inside-char": (httpx2.ReadError, httpx2.RemoteProtocolError),
    "reset-mid-frame": (httpx2.ReadError, httpx2.RemoteProtocolError),
    "half-close": (httpx2.RemoteProtocolError,),
    "stall": (httpx2.ReadTimeout,),
}


@pytest.mark.parametrize("fault", BREAKS)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_without_the_transport_httpx2_raises_on_the_same_faults(
    proxy_url: str, mock_server: str, dialect: str, fault: str
) -> None:
    call = CALLS[dialect]
    received = bytearray()
    with relay_to(proxy_url, FAULTS[fault]) as relay, httpx2.Client(
        timeout=httpx2.Timeout(10, read=DEADLINES.idle)
    ) as client:
        with pytest.raises(BASELINE[fault]):
            with client.stream("POST", relay.url + call.path, json=call.body,
                               headers=headers_of(call, None)) as r:
                for piece in r.iter_raw():
                    received += piece
        assert relay.stats().connections == 1
    assert len(received) > AT - 400  # the body up to the cut (its head came before)
    if fault == "reset-inside-char":
        with pytest.raises(UnicodeDecodeError):  # a plain reader got half a character
            bytes(received).decode()
    message = parse([bytes(received)], dialect=dialect)
    assert message.status is Status.INTERRUPTED
    assert len(message.text) < len(reply_text(SEED, TOKENS))
    assert generations(mock_server) == 1


def test_a_stream_cut_near_its_end_gives_its_last_frames_once(
    proxy_url: str, mock_server: str
) -> None:
    call = CALLS["openai-chat"]
    with relay_to(proxy_url, ()) as relay, http_client(timeout=10) as client:
        whole = read_through(client, relay.url, call, None)
        size = relay.stats().bytes_to_client
    assert_exact("openai-chat", whole)
    # Cut inside one of the last lines: by then the stream has ended in the journal, and the
    # resume gives the frames after the last whole one, then the end.
    with relay_to(proxy_url, [Fault.reset(after=size - 120, cut=Cut.INSIDE_LINE)]) as relay, \
            http_client(retry=RETRY, deadlines=DEADLINES, timeout=10) as client:
        pieces = read_through(client, relay.url, call, None)
        assert (relay.stats().faults, relay.stats().connections) == ({"reset": 1}, 2)
    assert_exact("openai-chat", pieces)
    assert b"".join(pieces).count(b"[DONE]") == 1
    assert generations(mock_server) == 2  # one per read above



@pytest.mark.parametrize("dialect", ["anthropic", "ollama"])
def test_a_post_with_last_event_id_continues_through_a_break(
    proxy_url: str, mock_server: str, dialect: str
) -> None:
    call = CALLS[dialect]
    with httpx2.Client(timeout=10) as plain, plain.stream(
        "POST", proxy_url + call.path, json=call.body, headers=headers_of(call, None)
    ) as response:
        stream_id = response.headers["unbroken-stream-id"]
        response.read()
    # The same POST again, asking for the frames after the fifth: the proxy sends 6, 7, ...
    headers = {**headers_of(call, None), "last-event-id": f"{stream_id}:5"}
    with relay_to(proxy_url, FAULTS["reset-mid-frame"]) as relay, http_client(
        retry=RETRY, deadlines=DEADLINES, timeout=10
    ) as client, client.stream("POST", relay.url + call.path, json=call.body,
                               headers=headers) as response:
        pieces = list(response.iter_raw())
        assert relay.stats().connections == 2
    assert_whole_frames(pieces)
    frames = frames_of(dialect, b"".join(pieces))
    assert len(frames) == call.total(TOKENS) - 5
    if dialect != "ollama":
        assert [f.id for f in frames] == [f"{stream_id}:{n}"
                                          for n in range(6, call.total(TOKENS) + 1)]
    assert generations(mock_server) == 1
