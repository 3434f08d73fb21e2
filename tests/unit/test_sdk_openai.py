"""from_openai over the real openai SDK, served fixed bodies by an in-process httpx2 transport."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import httpx2
import openai
import pytest
from tests.sdk_runs import ending
from tests.unit.sdk_support import fixed_body
from tests.unit.test_parse_bodies import DONE, chat, chat_body, responses_body, sse

from unbroken.errors import ProviderError, TransportError
from unbroken.finish import FinishReason, Status
from unbroken.message import ToolCall
from unbroken.sdk import AsyncTrackedStream, TrackedStream, from_openai


def client(body: bytes, *, broken: bool = False) -> openai.OpenAI:
    http = httpx2.Client(transport=fixed_body(body, broken=broken))
    return openai.OpenAI(
        api_key="sk-test", base_url="http://test/v1", http_client=http, max_retries=0
    )


def chat_stream(body: bytes, *, broken: bool = False) -> TrackedStream[object]:
    stream = client(body, broken=broken).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    return from_openai(stream)


def test_chat_chunks_pass_through_unchanged_and_the_message_completes() -> None:
    tracked = chat_stream(chat_body("Hel", "lo 世界"))
    seen = list(tracked)
    assert [type(chunk).__name__ for chunk in seen] == ["ChatCompletionChunk"] * 3
    assert [chunk.choices[0].delta.content for chunk in seen] == ["Hel", "lo 世界", None]  # type: ignore[attr-defined]
    message = tracked.message
    assert ending(message) == (Status.COMPLETED, FinishReason.STOP, "stop")
    assert (message.text, message.last_seq, message.id, message.model) == (
        "Hello 世界",
        3,
        "chatcmpl-1",
        "gpt-4o",
    )
    assert message.warnings == []  # the SDK swallows [DONE]: no end-marker warning
    assert [frame.delta for frame in message.trace.frames][1] == "text 'lo 世界'"


def test_chat_truncated_by_length() -> None:
    tracked = chat_stream(chat_body("Once upon", finish="length"))
    for _ in tracked:
        pass
    assert ending(tracked.message) == (Status.TRUNCATED, FinishReason.LENGTH, "length")


def test_chat_tool_calls_are_assembled() -> None:
    call = {
        "index": 0,
        "id": "call_7",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"q": '},
    }
    body = (
        sse(chat(tool_calls=[call]))
        + sse(chat(tool_calls=[{"index": 0, "function": {"arguments": '"unbroken"}'}}]))
        + sse(chat(finish="tool_calls"))
        + DONE
    )
    tracked = chat_stream(body)
    assert len(list(tracked)) == 3
    assert ending(tracked.message) == (Status.COMPLETED, FinishReason.TOOL_CALLS, "tool_calls")
    assert tracked.message.tool_calls == [
        ToolCall(index=0, id="call_7", name="lookup", arguments='{"q": "unbroken"}',
                 value={"q": "unbroken"})
    ]


def test_an_error_inside_the_stream_fails_the_message_and_propagates() -> None:
    error = {"error": {"message": "The server had an error", "type": "server_error"}}
    tracked = chat_stream(sse(chat("partial")) + sse(error))
    seen = []
    with pytest.raises(openai.APIError, match="The server had an error"):
        for chunk in tracked:
            seen.append(chunk)
    assert len(seen) == 1
    message = tracked.message
    assert (message.status, message.text) == (Status.FAILED, "partial")
    assert isinstance(message.error, ProviderError)
    assert (message.error.event.type, message.error.retryable) == ("server_error", True)


def test_a_broken_connection_interrupts_and_propagates() -> None:
    tracked = chat_stream(sse(chat("half")), broken=True)
    with pytest.raises(openai.APIConnectionError):
        for _ in tracked:
            pass
    message = tracked.message
    assert (message.status, message.text, message.finish_reason) == (
        Status.INTERRUPTED,
        "half",
        None,
    )
    assert isinstance(message.error, TransportError)
    assert isinstance(message.error.__cause__, openai.APIConnectionError)


def test_a_body_ending_without_finish_reason_is_interrupted() -> None:
    tracked = chat_stream(chat_body("Hel", finish=None, done=False))
    assert len(list(tracked)) == 1
    assert tracked.message.status is Status.INTERRUPTED


def test_leaving_the_loop_early_cancels() -> None:
    tracked = chat_stream(chat_body("a", "b", "c"))
    for chunk in tracked:
        assert chunk is not None
        break
    assert (tracked.message.status, tracked.message.text) == (Status.CANCELLED, "a")


def test_next_and_the_with_block() -> None:
    with chat_stream(chat_body("a", "b")) as tracked:
        first = next(tracked)
        assert first.choices[0].delta.content == "a"  # type: ignore[attr-defined]
    assert (tracked.message.status, tracked.message.text) == (Status.CANCELLED, "a")


def test_closing_after_the_end_changes_nothing() -> None:
    tracked = chat_stream(chat_body("a"))
    list(tracked)
    tracked.close()
    assert tracked.message.status is Status.COMPLETED


def responses_stream(body: bytes) -> TrackedStream[object]:
    stream = client(body).responses.create(model="gpt-4.1", input="hi", stream=True)
    return from_openai(stream)


def test_responses_events_complete_with_their_sequence_numbers() -> None:
    tracked = responses_stream(responses_body(["Hel", "lo"]))
    assert [event.type for event in tracked] == [  # type: ignore[attr-defined]
        "response.created",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.completed",
    ]
    message = tracked.message
    assert ending(message) == (Status.COMPLETED, FinishReason.STOP, "completed")
    assert (message.text, message.last_seq, message.seq_source, message.id) == (
        "Hello",
        3,
        "provider",
        "resp_1",
    )
    assert message.usage is not None and message.usage.total_tokens == 5
    assert message.warnings == []


def test_responses_incomplete_for_max_output_tokens_is_truncated() -> None:
    body = (
        responses_body(["Hel"])
        .replace(
            b'"type": "response.completed", "response": {"id": "resp_1", "status": "completed"',
            b'"type": "response.incomplete", "response": {"id": "resp_1", "status": "incomplete", '
            b'"incomplete_details": {"reason": "max_output_tokens"}',
        )
        .replace(b"event: response.completed", b"event: response.incomplete")
    )
    tracked = responses_stream(body)
    list(tracked)
    assert (tracked.message.status, tracked.message.raw_finish_reason) == (
        Status.TRUNCATED,
        "max_output_tokens",
    )


def test_responses_error_event_fails() -> None:
    created = responses_body([]).split(b"\n\n")[0] + b"\n\n"
    error = sse(
        {
            "type": "error",
            "code": "server_error",
            "message": "boom",
            "param": None,
            "sequence_number": 1,
        },
        event="error",
    )
    tracked = responses_stream(created + error)
    assert len(list(tracked)) == 2
    assert tracked.message.status is Status.FAILED
    assert isinstance(tracked.message.error, ProviderError)
    assert tracked.message.error.event.type == "server_error"


def test_an_api_error_in_a_responses_stream_uses_the_responses_dialect() -> None:
    created = responses_body([]).split(b"\n\n")[0] + b"\n\n"
    error = sse({"error": {"message": "slow down", "code": "rate_limit_exceeded"}})
    tracked = responses_stream(created + error)
    with pytest.raises(openai.APIError):
        list(tracked)
    assert tracked.message.status is Status.FAILED
    assert isinstance(tracked.message.error, ProviderError)
    assert (tracked.message.error.event.type, tracked.message.error.retryable) == (
        "rate_limit_exceeded",
        True,
    )


def async_client(body: bytes, *, broken: bool = False) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=fixed_body(body, broken=broken))
    return openai.AsyncOpenAI(
        api_key="sk-test", base_url="http://test/v1", http_client=http, max_retries=0
    )


@pytest.mark.anyio
async def test_async_chat_completes() -> None:
    stream = await async_client(chat_body("as", "ync")).chat.completions.create(
        model="gpt-4o", messages=[], stream=True
    )
    tracked = from_openai(stream)
    assert isinstance(tracked, AsyncTrackedStream)
    seen = [chunk async for chunk in tracked]
    assert len(seen) == 3
    assert (tracked.message.status, tracked.message.text) == (Status.COMPLETED, "async")


@pytest.mark.anyio
async def test_async_with_block_cancels_an_unfinished_stream() -> None:
    stream = await async_client(chat_body("a", "b")).chat.completions.create(
        model="gpt-4o", messages=[], stream=True
    )
    async with from_openai(stream) as tracked:
        await anext(tracked)
    assert (tracked.message.status, tracked.message.text) == (Status.CANCELLED, "a")


@pytest.mark.anyio
async def test_async_error_fails_and_propagates() -> None:
    error = {"error": {"message": "bad", "type": "invalid_request_error"}}
    stream = await async_client(sse(chat("x")) + sse(error)).chat.completions.create(
        model="gpt-4o", messages=[], stream=True
    )
    tracked = from_openai(stream)
    with pytest.raises(openai.APIError):
        async for _ in tracked:
            pass
    assert tracked.message.status is Status.FAILED
    assert isinstance(tracked.message.error, ProviderError)
    assert tracked.message.error.retryable is False


class Dumped:
    """An object with only pydantic's ``model_dump`` (no Stainless ``to_dict``)."""

    def __init__(self, payload: dict[str, object]) -> None:
        self.payload = payload

    def model_dump(self) -> dict[str, object]:
        return self.payload


def test_plain_dicts_and_model_dump_objects_are_accepted() -> None:
    tracked = from_openai(iter([chat("a"), Dumped(chat("b")), chat(finish="stop")]))
    assert len(list(tracked)) == 3
    tracked.close()  # nothing to close on a plain iterator; the verdict stands
    assert (tracked.message.status, tracked.message.text) == (Status.COMPLETED, "ab")


def test_a_keyboard_interrupt_cancels_and_propagates() -> None:
    def chunks() -> Iterator[dict[str, object]]:
        yield chat("a")
        raise KeyboardInterrupt

    tracked = from_openai(chunks())
    with pytest.raises(KeyboardInterrupt):
        list(tracked)
    assert (tracked.message.status, tracked.message.error) == (Status.CANCELLED, None)


def test_a_long_pause_between_events_is_a_stall_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 100.5, 115.0, 115.25])
    monkeypatch.setattr("unbroken.sdk.tracked.time", SimpleNamespace(monotonic=lambda: next(clock)))
    tracked = from_openai([chat("a"), chat("b"), chat(finish="stop")])
    list(tracked)
    assert [frame.t for frame in tracked.message.trace.frames] == [0.5, 15.0, 15.25]
    assert [(w.code, w.detail) for w in tracked.message.warnings] == [
        ("stall", "no event for 14.5 s")
    ]
