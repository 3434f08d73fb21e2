"""from_anthropic over the real anthropic SDK, served fixed bodies by an in-process transport."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import pytest
from tests.sdk_runs import ending
from tests.unit.sdk_support import fixed_body
from tests.unit.test_parse_bodies import anthropic_body, sse

from unbroken.errors import ProviderError, TransportError
from unbroken.events import Usage
from unbroken.finish import FinishReason, Status
from unbroken.message import ToolCall
from unbroken.sdk import AsyncTrackedStream, TrackedStream, from_anthropic

REQUEST: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}


def client(body: bytes, *, broken: bool = False) -> anthropic.Anthropic:
    http = httpx2.Client(transport=fixed_body(body, broken=broken))
    return anthropic.Anthropic(
        api_key="sk-ant-test", base_url="http://test", http_client=http, max_retries=0
    )


def raw_stream(body: bytes, *, broken: bool = False) -> TrackedStream[Any]:
    tracked: TrackedStream[Any] = from_anthropic(
        client(body, broken=broken).messages.create(**REQUEST, stream=True)
    )
    return tracked


def test_raw_events_pass_through_and_the_message_completes() -> None:
    tracked = raw_stream(anthropic_body(["Hello", " 世界"]))
    kinds = [event.type for event in tracked]
    # the SDK drops "ping" before anything sees it
    assert kinds == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    message = tracked.message
    assert ending(message) == (Status.COMPLETED, FinishReason.STOP, "end_turn")
    assert (message.text, message.id, message.model, message.end_marker) == (
        "Hello 世界",
        "msg_1",
        "claude-sonnet-4-5",
        "message_stop",
    )
    assert message.usage == Usage(seq=6, input_tokens=25, output_tokens=15)
    assert message.warnings == []


def test_max_tokens_is_truncated() -> None:
    tracked = raw_stream(anthropic_body(["Once"], stop_reason="max_tokens"))
    list(tracked)
    assert ending(tracked.message) == (Status.TRUNCATED, FinishReason.LENGTH, "max_tokens")


def test_a_tool_use_block_becomes_a_tool_call() -> None:
    start = anthropic_body([]).split(b"event: content_block_start")[0]
    block = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    body = (
        start
        + sse(
            {"type": "content_block_start", "index": 0, "content_block": block},
            event="content_block_start",
        )
        + sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"city": "Pa'},
            },
            event="content_block_delta",
        )
        + sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": 'ris"}'},
            },
            event="content_block_delta",
        )
        + sse({"type": "content_block_stop", "index": 0}, event="content_block_stop")
        + sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 9},
            },
            event="message_delta",
        )
        + sse({"type": "message_stop"}, event="message_stop")
    )
    with client(body).messages.stream(**REQUEST) as stream:
        tracked = from_anthropic(stream)
        kinds = [event.type for event in tracked]
    assert kinds.count("input_json") == 2  # the helper's own events are yielded too
    assert ending(tracked.message) == (Status.COMPLETED, FinishReason.TOOL_CALLS, "tool_use")
    assert tracked.message.tool_calls == [
        ToolCall(index=0, id="toolu_1", name="get_weather", arguments='{"city": "Paris"}',
                 value={"city": "Paris"})
    ]


def test_the_stream_helper_yields_its_own_events_without_doubling_the_text() -> None:
    with client(anthropic_body(["Hel", "lo"])).messages.stream(**REQUEST) as stream:
        tracked = from_anthropic(stream)
        kinds = [event.type for event in tracked]
        final = stream.get_final_text()
    assert kinds.count("text") == 2
    assert kinds.count("content_block_delta") == 2
    assert (tracked.message.text, final, tracked.message.status) == (
        "Hello",
        "Hello",
        Status.COMPLETED,
    )


def test_the_stream_manager_itself_is_entered_on_first_use() -> None:
    manager = client(anthropic_body(["a", "b"])).messages.stream(**REQUEST)
    tracked = from_anthropic(manager)
    assert tracked.stream is None
    texts = [event.text for event in tracked if event.type == "text"]
    assert texts == ["a", "b"]
    assert tracked.message.status is Status.COMPLETED
    tracked.close()
    assert tracked.stream is not None


def test_an_error_event_fails_the_message_and_propagates() -> None:
    head = anthropic_body(["partial"]).split(b"event: content_block_stop")[0]
    error = sse(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        event="error",
    )
    tracked = raw_stream(head + error)
    with pytest.raises(anthropic.APIStatusError):
        for _ in tracked:
            pass
    message = tracked.message
    assert (message.status, message.text) == (Status.FAILED, "partial")
    assert isinstance(message.error, ProviderError)
    assert (message.error.event.type, message.error.retryable) == ("overloaded_error", True)


def test_a_broken_connection_interrupts_and_propagates() -> None:
    head = anthropic_body(["half"]).split(b"event: content_block_stop")[0]
    tracked = raw_stream(head, broken=True)
    # anthropic 2.17 wraps httpx2's error in APIConnectionError; older versions let it through.
    with pytest.raises((httpx2.ReadError, anthropic.APIConnectionError)) as caught:
        for _ in tracked:
            pass
    message = tracked.message
    assert (message.status, message.text) == (Status.INTERRUPTED, "half")
    assert isinstance(message.error, TransportError)
    assert message.error.__cause__ is caught.value


def test_leaving_early_cancels_and_closes_the_sdk_stream() -> None:
    tracked = raw_stream(anthropic_body(["a", "b"]))
    for event in tracked:
        if event.type == "content_block_delta":
            break
    assert (tracked.message.status, tracked.message.text) == (Status.CANCELLED, "a")
    assert tracked.stream.response.is_closed


def async_client(body: bytes) -> anthropic.AsyncAnthropic:
    http = httpx2.AsyncClient(transport=fixed_body(body))
    return anthropic.AsyncAnthropic(
        api_key="sk-ant-test", base_url="http://test", http_client=http, max_retries=0
    )


@pytest.mark.anyio
async def test_async_raw_events_complete() -> None:
    stream = await async_client(anthropic_body(["as", "ync"])).messages.create(
        **REQUEST, stream=True
    )
    tracked = from_anthropic(stream)
    assert isinstance(tracked, AsyncTrackedStream)
    assert len([event async for event in tracked]) == 7
    assert (tracked.message.status, tracked.message.text) == (Status.COMPLETED, "async")


@pytest.mark.anyio
async def test_async_stream_manager_is_entered_and_exited() -> None:
    manager = async_client(anthropic_body(["x", "y"])).messages.stream(**REQUEST)
    async with from_anthropic(manager) as tracked:
        texts = [event.text async for event in tracked if event.type == "text"]
    assert texts == ["x", "y"]
    assert (tracked.message.status, tracked.message.text) == (Status.COMPLETED, "xy")


@pytest.mark.anyio
async def test_async_early_exit_with_aclose_cancels() -> None:
    stream = await async_client(anthropic_body(["a", "b"])).messages.create(**REQUEST, stream=True)
    tracked = from_anthropic(stream)
    async for event in tracked:
        if event.type == "content_block_delta":
            break
    await tracked.aclose()
    assert (tracked.message.status, tracked.message.text) == (Status.CANCELLED, "a")
