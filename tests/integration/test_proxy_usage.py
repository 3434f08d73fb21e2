"""Usage through the proxy: asked for where the provider needs asking, journaled whatever the end.

OpenAI chat streams report usage only for ``stream_options.include_usage``. The proxy adds it
when the request did not set it (``request_usage``, on by default); the usage-only chunk that
answers is journaled in the stream's state, not as a frame, so the official SDK sees the body it
asked for and the seqs stay 1, 2, 3 ... for a resume. The mock emits that chunk exactly when the
request asks for it, so its usage in the journal proves what the proxy asked.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx2
import openai
import pytest
from tests.integration.test_proxy_support import (
    CALLS,
    KEY,
    FrameReader,
    frames_of,
    message_of,
    running_proxy,
    stream_status,
)

from unbroken.finish import Status
from unbroken.mock import reply_text
from unbroken.proxy.__main__ import build_parser, config_from_args

pytestmark = pytest.mark.integration

SEED, TOKENS = 4, 6
AUTH = {"authorization": f"Bearer {KEY}"}
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
CHAT = CALLS["openai-chat"]
# The mock's usage: 12 prompt tokens, one output token per delta; details all 0.
USAGE = {"input_tokens": 12, "output_tokens": TOKENS, "total_tokens": 12 + TOKENS,
         "reasoning_tokens": 0, "cached_tokens": 0}
# role chunk, TOKENS content chunks, finish chunk, [DONE]: the usage chunk is not counted.
FRAMES = TOKENS + 3
SCENARIO = f"seed={SEED}; tokens={TOKENS}"


@pytest.fixture(scope="module")
def proxy(mock_server_session: str) -> Any:
    with running_proxy(mock_server_session) as (base_url, _app):
        yield base_url


def sdk_chat(proxy: str, scenario: str = SCENARIO, **options: Any) -> tuple[str, list[Any]]:
    """The official SDK's chunks of one streamed chat, and the proxy's stream id."""
    with openai.OpenAI(base_url=proxy + "/v1", api_key=KEY, max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=MESSAGES, stream=True,
            extra_headers={"Unbroken-Mock": scenario}, **options)
        chunks = list(raw.parse())
    return raw.headers["unbroken-stream-id"], chunks


def text_of(chunks: list[Any]) -> str:
    return "".join(choice.delta.content or "" for chunk in chunks for choice in chunk.choices)


def test_the_sdk_gets_the_body_it_asked_for_and_the_journal_gets_the_usage(
        proxy: str) -> None:
    stream_id, chunks = sdk_chat(proxy)
    assert text_of(chunks) == reply_text(SEED, TOKENS)
    # role, the deltas, the finish chunk: no usage-only chunk, no usage on any chunk.
    assert len(chunks) == TOKENS + 2
    assert [chunk.usage for chunk in chunks] == [None] * (TOKENS + 2)
    assert all(len(chunk.choices) == 1 for chunk in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    status = stream_status(proxy, stream_id)
    assert (status["status"], status["last_seq"], status["usage"], status["usage_missing"]) == (
        "completed", FRAMES, USAGE, None)


def test_the_raw_body_has_no_usage_chunk_and_no_gap(proxy: str) -> None:
    response = httpx2.post(proxy + CHAT.path, json=CHAT.body, headers=CHAT.headers(SCENARIO),
                           timeout=30)
    stream_id = response.headers["unbroken-stream-id"]
    frames = frames_of("openai-chat", response.content)
    assert [frame.id for frame in frames] == [f"{stream_id}:{n}" for n in range(1, FRAMES + 1)]
    assert [json.loads(frame.data)["choices"] != [] for frame in frames[:-1]] == [True] * (
        FRAMES - 1)
    assert b'"usage"' not in response.content
    assert frames[-1].data == "[DONE]"


def test_a_client_that_asks_for_usage_gets_the_chunk(proxy: str) -> None:
    stream_id, chunks = sdk_chat(proxy, stream_options={"include_usage": True})
    assert text_of(chunks) == reply_text(SEED, TOKENS)
    assert len(chunks) == TOKENS + 3
    assert [chunk.usage for chunk in chunks[:-1]] == [None] * (TOKENS + 2)
    last = chunks[-1]
    assert last.choices == []
    assert (last.usage.prompt_tokens, last.usage.completion_tokens,
            last.usage.total_tokens) == (12, TOKENS, 12 + TOKENS)
    status = stream_status(proxy, stream_id)
    assert (status["last_seq"], status["usage"]) == (FRAMES + 1, USAGE)  # the chunk is a frame


def test_a_client_that_says_no_is_not_overruled(proxy: str) -> None:
    stream_id, chunks = sdk_chat(proxy, stream_options={"include_usage": False})
    assert len(chunks) == TOKENS + 2
    status = stream_status(proxy, stream_id)
    assert (status["last_seq"], status["usage"], status["usage_missing"]) == (
        FRAMES, None, "the upstream reported no usage")


def test_the_flag_off_asks_nothing(mock_server: str) -> None:
    with running_proxy(mock_server, request_usage=False) as (proxy, _app):
        stream_id, chunks = sdk_chat(proxy)
        assert text_of(chunks) == reply_text(SEED, TOKENS)
        assert len(chunks) == TOKENS + 2
        status = stream_status(proxy, stream_id)
    assert (status["status"], status["last_seq"], status["usage"], status["usage_missing"]) == (
        "completed", FRAMES, None, "the upstream reported no usage")


def test_the_command_line_flag() -> None:
    parser = build_parser()
    assert config_from_args(parser.parse_args([])).request_usage is True
    assert config_from_args(parser.parse_args(["--no-request-usage"])).request_usage is False


def test_resume_across_the_kept_out_chunk_is_exact(proxy: str) -> None:
    # The upstream stalls right after the usage chunk (wire frame T+3), before [DONE].
    scenario = f"{SCENARIO}; stall_after={TOKENS + 3}; stall_s=3"
    with httpx2.Client(timeout=30) as client:
        with client.stream("POST", proxy + CHAT.path, json=CHAT.body,
                           headers=CHAT.headers(scenario)) as response:
            stream_id = response.headers["unbroken-stream-id"]
            head = FrameReader(response, "openai-chat").take(TOKENS + 2)
            # The usage lands in the state on its own, while the stream is still going.
            deadline = time.monotonic() + 10
            while (status := stream_status(proxy, stream_id))["usage"] is None:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        assert (status["status"], status["last_seq"], status["usage"]) == (
            "streaming", TOKENS + 2, USAGE)
        assert [frame.id for frame in head] == [f"{stream_id}:{n}" for n in
                                                range(1, TOKENS + 3)]
        # A reader that had the deltas but not the finish chunk: the finish, then [DONE].
        events = client.get(f"{proxy}/v1/streams/{stream_id}/events",
                            headers=AUTH | {"last-event-id": f"{stream_id}:{TOKENS + 1}"})
        rest = frames_of("openai-chat", events.content)
        assert [frame.id for frame in rest] == [f"{stream_id}:{TOKENS + 2}",
                                                f"{stream_id}:{TOKENS + 3}"]
        assert json.loads(rest[0].data)["choices"][0]["finish_reason"] == "stop"
        assert rest[1].data == "[DONE]"
        # The same POST after the finish chunk: [DONE] alone, with the next seq.
        again = client.post(proxy + CHAT.path, json=CHAT.body, headers=CHAT.headers(scenario)
                            | {"last-event-id": f"{stream_id}:{TOKENS + 2}"})
        assert [(frame.id, frame.data) for frame in frames_of("openai-chat", again.content)] \
            == [(f"{stream_id}:{TOKENS + 3}", "[DONE]")]
    # The reader's view: its frames up to T+1, then the resumed ones: no gap, no duplicate.
    head_bytes = b"".join(frame.raw for frame in head[:-1])
    message = message_of("openai-chat", head_bytes, events.content)
    assert (message.status, message.text, message.duplicates, message.gaps,
            message.last_seq) == (Status.COMPLETED, reply_text(SEED, TOKENS), 0, [], FRAMES)
    assert message.usage is None  # the client did not ask: it never got the chunk
    assert stream_status(proxy, stream_id)["usage"] == USAGE


# What arrived before a stream's end is kept: Anthropic says its usage in message_start (12 in,
# 1 out so far), Gemini on every chunk (cumulative); an OpenAI chat stream cut before its
# usage-only chunk has none, and says why.
ARRIVED: dict[str, Any] = {
    "anthropic": {"input_tokens": 12, "output_tokens": 1, "cached_tokens": 0},
    "gemini": {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15},
    "openai-chat": None,
}


@pytest.mark.parametrize("dialect", list(ARRIVED))
def test_a_cancelled_stream_keeps_the_usage_that_arrived(proxy: str, dialect: str) -> None:
    call = CALLS[dialect]
    stop_at = call.first_text + 2  # three text frames arrived
    scenario = f"{SCENARIO}; stall_after={stop_at}; stall_s=30"
    with httpx2.Client(timeout=30) as client:
        with client.stream("POST", proxy + call.path, json=call.body,
                           headers=call.headers(scenario)) as response:
            stream_id = response.headers["unbroken-stream-id"]
            reader = FrameReader(response, dialect)
            reader.take(stop_at)
            cancelled = client.post(f"{proxy}/v1/streams/{stream_id}/cancel", headers=AUTH)
            assert cancelled.status_code == 200
            reader.rest()
        capture = client.get(f"{proxy}/v1/streams/{stream_id}/capture", headers=AUTH)
    status = stream_status(proxy, stream_id)
    missing = None if ARRIVED[dialect] else \
        "the stream ended cancelled before the upstream reported usage"
    assert (status["status"], status["last_seq"], status["usage"], status["usage_missing"]) == (
        "cancelled", stop_at + 1, ARRIVED[dialect], missing)
    end = json.loads(capture.content.splitlines()[-1])
    assert (end["status"], end["usage"], end.get("usage_missing")) == (
        "cancelled", ARRIVED[dialect], missing)


@pytest.mark.parametrize("dialect", list(ARRIVED))
def test_an_interrupted_stream_keeps_the_usage_that_arrived(proxy: str, dialect: str) -> None:
    call = CALLS[dialect]
    drop_after = call.first_text + 2
    response = httpx2.post(proxy + call.path, json=call.body,
                           headers=call.headers(f"{SCENARIO}; drop_after={drop_after}"),
                           timeout=30)
    status = stream_status(proxy, response.headers["unbroken-stream-id"])
    missing = None if ARRIVED[dialect] else \
        "the stream ended interrupted before the upstream reported usage"
    assert (status["status"], status["last_seq"], status["usage"], status["usage_missing"]) == (
        "interrupted", drop_after + 1, ARRIVED[dialect], missing)
