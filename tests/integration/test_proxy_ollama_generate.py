"""Ollama's ``POST /api/generate`` through the proxy: journaled, resumable, one generation; and
``unbroken.stream`` / the official ``ollama`` package on it, direct and through the proxy."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx2
import ollama
import pytest
from tests.integration.test_proxy_support import (
    KEY,
    OLLAMA_GENERATE,
    frames_of,
    message_of,
    mock_counts,
    read_some,
    running_proxy,
    stream_status,
)

import unbroken
from unbroken.cli.demo import CutOnceTransport
from unbroken.errors import Interrupted
from unbroken.events import TextDelta
from unbroken.finish import FinishReason, Status
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

CALL = OLLAMA_GENERATE
PATH = CALL.path
SEED, TOKENS = 7, 12
TOTAL = CALL.total(TOKENS)  # TOKENS text lines and the done line
# Slow enough that a disconnect lands while the generation is still running.
SCENARIO = f"seed={SEED}; tokens={TOKENS}; delay_ms=15"
TEXT = reply_text(SEED, TOKENS)


@pytest.fixture(scope="module")
def proxy(mock_server_session: str) -> Iterator[str]:
    with running_proxy(mock_server_session) as (base_url, _app):
        yield base_url


def direct_body(mock: str, scenario: str) -> bytes:
    """The mock's own body for the request (one more generation upstream)."""
    response = httpx2.post(mock + PATH, json=CALL.body, headers=CALL.headers(scenario),
                           timeout=10)
    assert response.status_code == 200
    return response.content


def test_a_generate_stream_is_journaled_and_forwarded_verbatim(proxy: str,
                                                                 mock_server: str) -> None:
    scenario = f"seed={SEED}; tokens={TOKENS}"
    response = httpx2.post(proxy + PATH, json=CALL.body, headers=CALL.headers(scenario),
                           timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    stream_id = response.headers["unbroken-stream-id"]
    assert stream_id.startswith("ub_")
    assert response.headers["unbroken-stream-token"]
    status = stream_status(proxy, stream_id)
    assert (status["status"], status["finish_reason"], status["text"], status["last_seq"],
            status["upstream_requests"]) == ("completed", "stop", TEXT, TOTAL, 1)
    assert mock_counts(mock_server) == {"generations": {PATH: 1}, "resumes": {}}
    assert response.content == direct_body(mock_server, scenario)


@pytest.mark.parametrize("cut", [1, 4])
def test_the_same_post_with_last_event_id_gets_the_lines_after_it(
    proxy: str, mock_server: str, cut: int
) -> None:
    with httpx2.Client(base_url=proxy, timeout=10) as client:
        with client.stream("POST", PATH, json=CALL.body,
                           headers=CALL.headers(SCENARIO)) as response:
            stream_id = response.headers["unbroken-stream-id"]
            head, _ = read_some(response, "ollama", cut)
        # The client hung up after `cut` lines; the generation goes on in the proxy.
        headers = CALL.headers(SCENARIO) | {"Last-Event-ID": f"{stream_id}:{cut}"}
        resumed = client.post(PATH, json=CALL.body, headers=headers)
    assert resumed.status_code == 200
    assert resumed.headers["content-type"] == "application/x-ndjson"
    assert resumed.headers["unbroken-stream-id"] == stream_id
    assert "unbroken-stream-token" not in resumed.headers
    assert len(frames_of("ollama", resumed.content)) == TOTAL - cut
    message = message_of("ollama", head + resumed.content)
    assert (message.text, message.status, message.duplicates, message.last_seq) == (
        TEXT, Status.COMPLETED, 0, TOTAL
    )
    assert head + resumed.content == direct_body(mock_server, SCENARIO)
    # The cut stream and its resume: one generation; the direct body above: the second.
    assert mock_counts(mock_server) == {"generations": {PATH: 2}, "resumes": {}}


def test_the_events_endpoint_serves_the_lines_after_the_cut_as_sse(
    proxy: str, mock_server: str
) -> None:
    cut = 3
    with httpx2.Client(base_url=proxy, timeout=10) as client:
        with client.stream("POST", PATH, json=CALL.body,
                           headers=CALL.headers(SCENARIO)) as response:
            stream_id = response.headers["unbroken-stream-id"]
            _, head_lines = read_some(response, "ollama", cut)
        events = client.get(f"/v1/streams/{stream_id}/events",
                            headers={"authorization": f"Bearer {KEY}",
                                     "Last-Event-ID": f"{stream_id}:{cut}"})
    assert events.status_code == 200
    assert events.headers["content-type"] == "text/event-stream; charset=utf-8"
    rest = frames_of("openai-chat", events.content)  # SSE events
    assert [event.id for event in rest] == [f"{stream_id}:{seq}" for seq in range(cut + 1,
                                                                                   TOTAL + 1)]
    done = json.loads(rest[-1].data)
    assert (done["done"], done["done_reason"], done["context"]) == (True, "stop", [1, 2, 3])
    head_text = CALL.text_after(SEED, TOKENS, cut)
    assert "".join(line.value["response"] for line in head_lines) == head_text
    resumed = message_of("ollama", events.content)
    assert head_text + resumed.text == TEXT
    assert (resumed.status, resumed.finish_reason, resumed.duplicates) == (
        Status.COMPLETED, FinishReason.STOP, 0
    )
    assert mock_counts(mock_server)["generations"] == {PATH: 1}


@pytest.mark.parametrize("mid", [False, True], ids=["between-lines", "inside-a-character"])
def test_an_upstream_cut_ends_interrupted_with_the_prefix_and_an_error_line(
    proxy: str, mock_server: str, mid: bool
) -> None:
    taken = 4
    scenario = f"seed={SEED}; tokens={TOKENS}; drop_after={taken}" + ("; drop_mid=1" if mid
                                                                       else "")
    response = httpx2.post(proxy + PATH, json=CALL.body, headers=CALL.headers(scenario),
                           timeout=10)
    assert response.status_code == 200
    lines = frames_of("ollama", response.content)
    assert len(lines) == taken + 1
    assert list(lines[-1].value) == ["error"]
    assert "upstream stream broke" in lines[-1].value["error"]
    clean = frames_of("ollama", direct_body(mock_server, f"seed={SEED}; tokens={TOKENS}"))
    assert [line.raw for line in lines[:taken]] == [line.raw for line in clean[:taken]]
    status = stream_status(proxy, response.headers["unbroken-stream-id"])
    assert (status["status"], status["finish_reason"], status["last_seq"]) == (
        "interrupted", None, taken + 1
    )
    assert status["text"] == CALL.text_after(SEED, TOKENS, taken) == TEXT[: len(status["text"])]
    assert status["error"]["type"] == "TransportError"
    assert mock_counts(mock_server)["generations"] == {PATH: 2}  # the cut one, the clean one


def test_stream_false_passes_through_untouched(proxy: str, mock_server: str) -> None:
    body = {**CALL.body, "stream": False}
    scenario = f"seed={SEED}; tokens={TOKENS}"
    proxied = httpx2.post(proxy + PATH, json=body, headers=CALL.headers(scenario), timeout=10)
    assert proxied.status_code == 200
    assert proxied.headers["content-type"] == "application/json"
    assert "unbroken-stream-id" not in proxied.headers
    assert (proxied.json()["response"], proxied.json()["done_reason"]) == (TEXT, "stop")
    direct = httpx2.post(mock_server + PATH, json=body, headers=CALL.headers(scenario),
                         timeout=10)
    assert proxied.content == direct.content
    assert mock_counts(mock_server)["generations"] == {PATH: 2}


def ollama_generate(host: str, scenario: str) -> list[ollama.GenerateResponse]:
    headers = {"Unbroken-Mock": scenario, "Authorization": f"Bearer {KEY}"}
    with ollama.Client(host=host, headers=headers) as client:
        return list(client.generate(model="m", prompt="hi", stream=True))


def test_the_ollama_package_generates_through_the_proxy(proxy: str, mock_server: str) -> None:
    scenario = f"seed={SEED}; tokens={TOKENS}"
    for host in (mock_server, proxy):
        parts = ollama_generate(host, scenario)
        assert "".join(part.response or "" for part in parts) == TEXT
        assert [part.done for part in parts] == [False] * TOKENS + [True]
        last = parts[-1]
        assert (last.done_reason, last.context, last.prompt_eval_count, last.eval_count) == (
            "stop", [1, 2, 3], 12, TOKENS
        )
    # An upstream cut reaches the package as Ollama's own error line, written by the proxy.
    with pytest.raises(ollama.ResponseError, match="upstream stream broke"):
        ollama_generate(proxy, f"{scenario}; drop_after=3")
    assert mock_counts(mock_server)["generations"] == {PATH: 3}


def test_unbroken_stream_reads_generate_directly(mock_server: str) -> None:
    with unbroken.stream("POST", mock_server + PATH, dialect="ollama", json=CALL.body,
                         headers=CALL.headers(f"seed={SEED}; tokens={TOKENS}")) as s:
        text = "".join(event.text for event in s if isinstance(event, TextDelta))
    message = s.message
    assert text == message.text == TEXT
    assert (message.status, message.finish_reason, message.raw_finish_reason) == (
        Status.COMPLETED, FinishReason.STOP, "stop"
    )
    assert message.usage is not None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (12, TOKENS)
    assert (message.last_seq, s.connections) == (TOTAL, 1)


def test_unbroken_stream_never_replays_a_direct_generate_after_a_cut(mock_server: str) -> None:
    # Straight from Ollama nothing identifies the stream: no resume, no second generation.
    taken = 5
    scenario = f"seed={SEED}; tokens={TOKENS}; drop_after={taken}"
    with pytest.raises(Interrupted) as raised, unbroken.stream(
        "POST", mock_server + PATH, dialect="ollama", json=CALL.body,
        headers=CALL.headers(scenario),
    ) as s:
        for _ in s:
            pass
    assert raised.value.message is not None
    assert raised.value.message.text == CALL.text_after(SEED, TOKENS, taken)
    assert raised.value.message.status is Status.INTERRUPTED
    assert mock_counts(mock_server)["generations"] == {PATH: 1}


@pytest.mark.parametrize("cut_after", [150, 1100])  # the body is 1505 bytes
def test_unbroken_stream_through_the_proxy_resumes_a_cut_generate(
    mock_server: str, cut_after: int
) -> None:
    log: list[str] = []
    with (
        running_proxy(mock_server) as (proxy, _),
        httpx2.Client(transport=CutOnceTransport(cut_after, log)) as http,
        unbroken.stream("POST", proxy + PATH, dialect="ollama", json=CALL.body, client=http,
                        headers=CALL.headers(SCENARIO),
                        retry=unbroken.Retry(backoff=0.01)) as s,
    ):
        text = "".join(s.iter_text())
    assert text == s.message.text == TEXT
    assert (s.message.status, s.message.finish_reason) == (Status.COMPLETED, FinishReason.STOP)
    assert (s.connections, s.message.duplicates, s.message.last_seq) == (2, 0, TOTAL)
    assert log[0].startswith("network cut after")
    [resume] = [line for line in log if line.startswith("resume:")]
    stream_id, _, seq = resume.rsplit(" ", 1)[1].rpartition(":")
    assert stream_id.startswith("ub_")
    assert 0 < int(seq) < TOTAL
    assert mock_counts(mock_server) == {"generations": {PATH: 1}, "resumes": {}}
