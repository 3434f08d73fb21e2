"""from_gemini / from_ollama over the real SDKs, served fixed bodies by an in-process transport.

These cover what the mock does not serve: the exact wire payload an SDK object dumps back to,
a Gemini stream that ends cleanly without a finish reason, a blocked prompt, thought signatures,
error bodies the SDKs handle oddly, and Ollama's ``/api/generate``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import ollama
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from tests.sdk_runs import Run, drain, ending
from tests.unit.sdk_support import fixed_body

from unbroken import from_gemini, from_ollama
from unbroken.errors import PayloadError, TransportError, UpstreamStatusError
from unbroken.events import Usage
from unbroken.finish import FinishReason, Status
from unbroken.sdk import AsyncTrackedStream, TrackedStream
from unbroken.sdk.gemini import GeminiAdapter
from unbroken.sdk.ollama import OllamaAdapter

# --- Gemini ----------------------------------------------------------------------------------

# Signatures with "+" and "/": pydantic alone would dump them URL-safe ("-" and "_").
SIGNATURE = "+vv8/f7/+vv8/f7/CAFE"
WIRE_CHUNKS: list[dict[str, Any]] = [
    {
        "candidates": [
            {
                "content": {
                    "parts": [{"text": "Let me think.", "thought": True,
                               "thoughtSignature": SIGNATURE}],
                    "role": "model",
                },
                "index": 0,
            }
        ],
        "modelVersion": "gemini-2.5-flash",
        "responseId": "resp-1",
        "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9},
    },
    {
        "candidates": [
            {"content": {"parts": [{"text": "Tōkyō is 東京 🌧"}], "role": "model"}, "index": 0}
        ],
        "modelVersion": "gemini-2.5-flash",
        "responseId": "resp-1",
    },
    {
        "candidates": [
            {
                "content": {
                    "parts": [
                        {
                            "functionCall": {"args": {"city": "東京", "days": [1, 2]},
                                             "id": "call-1", "name": "get_weather"},
                            "thoughtSignature": SIGNATURE,
                        }
                    ],
                    "role": "model",
                },
                "finishReason": "STOP",
                "index": 0,
                "safetyRatings": [
                    {"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"}
                ],
            }
        ],
        "modelVersion": "gemini-2.5-flash",
        "responseId": "resp-1",
        "usageMetadata": {
            "cachedContentTokenCount": 2,
            "candidatesTokenCount": 11,
            "promptTokenCount": 9,
            "thoughtsTokenCount": 5,
            "totalTokenCount": 25,
        },
    },
]


def sse(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\r\n\r\n"


def gemini_client(body: bytes, *, status: int = 200,
                  content_type: str = "text/event-stream") -> genai.Client:
    http = httpx2.Client(transport=fixed_body(body, status=status, content_type=content_type))
    options = genai_types.HttpOptions(base_url="http://test", httpx_client=http)
    return genai.Client(api_key="fake-key", http_options=options)


def gemini_run(body: bytes, **response: Any) -> Run:
    client = gemini_client(body, **response)
    tracked = from_gemini(client.models.generate_content_stream(model="m", contents="hi"))
    assert isinstance(tracked, TrackedStream)
    return drain(tracked)


def test_each_response_dumps_back_to_exactly_its_wire_json() -> None:
    result = gemini_run(b"".join(sse(chunk) for chunk in WIRE_CHUNKS))
    assert result.raised is None
    adapter = GeminiAdapter()
    assert [adapter.payload(chunk) for chunk in result.received] == WIRE_CHUNKS
    assert result.received[0].candidates[0].content.parts[0].thought_signature == (
        b"\xfa\xfb\xfc\xfd\xfe\xff\xfa\xfb\xfc\xfd\xfe\xff\x08\x01D"
    )


def test_reasoning_text_tool_call_and_usage_come_through_the_sdk() -> None:
    result = gemini_run(b"".join(sse(chunk) for chunk in WIRE_CHUNKS))
    message = result.message
    assert ending(message) == (Status.COMPLETED, FinishReason.TOOL_CALLS, "STOP")
    assert (message.text, message.reasoning) == ("Tōkyō is 東京 🌧", "Let me think.")
    assert message.reasoning_signature == SIGNATURE
    assert [(call.id, call.name, call.value) for call in message.tool_calls] == [
        ("call-1", "get_weather", {"city": "東京", "days": [1, 2]})
    ]
    assert message.usage == Usage(seq=3, input_tokens=9, output_tokens=11, total_tokens=25,
                                  reasoning_tokens=5, cached_tokens=2)
    assert (message.id, message.model) == ("resp-1", "gemini-2.5-flash")


def test_a_stream_that_ends_without_a_finish_reason_is_interrupted() -> None:
    result = gemini_run(sse(WIRE_CHUNKS[1]))
    message = result.message
    assert (result.raised, len(result.received)) == (None, 1)  # the SDK ends without complaint
    assert (message.status, message.finish_reason, message.text) == (
        Status.INTERRUPTED, None, "Tōkyō is 東京 🌧"
    )
    assert [warning.code for warning in message.warnings] == ["no_finish_reason"]


def test_a_blocked_prompt_is_filtered() -> None:
    blocked = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
               "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3}}
    result = gemini_run(sse(blocked))
    message = result.message
    assert result.raised is None
    feedback = result.received[0].prompt_feedback
    assert feedback.block_reason == genai_types.BlockedReason.PROHIBITED_CONTENT
    assert (message.status, message.finish_reason, message.raw_finish_reason, message.text) == (
        Status.FILTERED, FinishReason.CONTENT_FILTER, "PROHIBITED_CONTENT", ""
    )


def test_an_error_status_with_a_non_json_body_interrupts_with_its_text() -> None:
    result = gemini_run(b"<html>upstream down</html>", status=502, content_type="text/html")
    message = result.message
    assert isinstance(result.raised, genai_errors.ServerError)
    error = message.error
    assert isinstance(error, UpstreamStatusError)
    assert (message.status, error.status, error.retryable, error.retry_after) == (
        Status.INTERRUPTED, 502, True, None)
    assert "<html>upstream down</html>" in error.body


def test_an_in_stream_error_without_a_code_breaks_the_sdk_and_interrupts() -> None:
    # google-genai compares the missing code with 400 and raises TypeError: the error body is
    # lost to us, but the message still does not end completed.
    error = {"error": {"message": "quota gone", "status": "RESOURCE_EXHAUSTED"}}
    result = gemini_run(sse(WIRE_CHUNKS[1]) + sse(error))
    message = result.message
    assert isinstance(result.raised, TypeError)
    assert (message.status, message.text) == (Status.INTERRUPTED, "Tōkyō is 東京 🌧")
    assert isinstance(message.error, TransportError)
    assert message.error.__cause__ is result.raised


def test_an_error_object_that_is_not_the_first_key_is_dropped_by_the_sdk() -> None:
    # The SDK recognises an error only when its JSON starts with {"error": ...}; otherwise it
    # yields an empty response. The message ends interrupted, not completed.
    error = {"candidates": [], "error": {"code": 500, "message": "boom", "status": "INTERNAL"}}
    result = gemini_run(sse(WIRE_CHUNKS[1]) + sse(error))
    message = result.message
    assert result.raised is None
    assert GeminiAdapter().payload(result.received[1]) == {"candidates": []}
    assert (message.status, message.error) == (Status.INTERRUPTED, None)


@pytest.mark.anyio
async def test_an_unawaited_async_call_is_refused_clearly() -> None:
    client = gemini_client(sse(WIRE_CHUNKS[1]))
    call = client.aio.models.generate_content_stream(model="m", contents="hi")
    with pytest.raises(TypeError, match=r"pass `await client\.aio\.models"):
        from_gemini(call)  # type: ignore[call-overload]


@pytest.mark.anyio
async def test_async_client_gives_an_async_tracked_stream() -> None:
    body = b"".join(sse(chunk) for chunk in WIRE_CHUNKS)
    http = httpx2.AsyncClient(transport=fixed_body(body))
    options = genai_types.HttpOptions(base_url="http://test", httpx_async_client=http)
    client = genai.Client(api_key="fake-key", http_options=options)
    stream = await client.aio.models.generate_content_stream(model="m", contents="hi")
    async with from_gemini(stream) as tracked:
        assert isinstance(tracked, AsyncTrackedStream)
        chunks = [chunk async for chunk in tracked]
    assert [GeminiAdapter().payload(chunk) for chunk in chunks] == WIRE_CHUNKS
    assert (tracked.message.status, tracked.message.text) == (Status.COMPLETED, "Tōkyō is 東京 🌧")
    await http.aclose()


# --- Ollama ----------------------------------------------------------------------------------


def ndjson(*lines: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(line, ensure_ascii=False).encode() + b"\n" for line in lines)


def ollama_client(body: bytes, *, status: int = 200) -> ollama.Client:
    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers={"content-type": "application/x-ndjson"},
                              content=body)

    return ollama.Client(host="http://test", transport=httpx.MockTransport(respond))


def ollama_run(stream: Any) -> Run:
    tracked = from_ollama(stream)
    assert isinstance(tracked, TrackedStream)
    return drain(tracked)


GENERATE_LINES: list[dict[str, Any]] = [
    {"model": "qwen3", "created_at": "2025-01-01T00:00:00Z", "response": "",
     "thinking": "Short.", "done": False},
    {"model": "qwen3", "created_at": "2025-01-01T00:00:01Z", "response": "Hello ", "done": False},
    {"model": "qwen3", "created_at": "2025-01-01T00:00:02Z", "response": "世界", "done": False},
    {"model": "qwen3", "created_at": "2025-01-01T00:00:03Z", "response": "", "done": True,
     "done_reason": "length", "context": [1, 2, 3], "total_duration": 900,
     "load_duration": 100, "prompt_eval_count": 6, "prompt_eval_duration": 200,
     "eval_count": 3, "eval_duration": 300},
]


def test_generate_lines_dump_back_to_their_wire_json_and_truncate() -> None:
    client = ollama_client(ndjson(*GENERATE_LINES))
    result = ollama_run(client.generate(model="qwen3", prompt="hi", stream=True))
    message = result.message
    assert result.raised is None
    assert all(type(part) is ollama.GenerateResponse for part in result.received)
    assert [OllamaAdapter().payload(part) for part in result.received] == GENERATE_LINES
    assert ending(message) == (Status.TRUNCATED, FinishReason.LENGTH, "length")
    assert (message.text, message.reasoning, message.model) == ("Hello 世界", "Short.", "qwen3")
    assert message.usage == Usage(seq=4, input_tokens=6, output_tokens=3)


CHAT_LINES: list[dict[str, Any]] = [
    {"model": "qwen3", "created_at": "2025-01-01T00:00:00Z",
     "message": {"role": "assistant", "content": "", "thinking": "Hmm."}, "done": False},
    {"model": "qwen3", "created_at": "2025-01-01T00:00:01Z",
     "message": {"role": "assistant", "content": "Hi"}, "done": False},
]


def test_chat_thinking_is_reasoning_and_a_clean_end_before_done_is_interrupted() -> None:
    client = ollama_client(ndjson(*CHAT_LINES))
    messages = [{"role": "user", "content": "hi"}]
    result = ollama_run(client.chat(model="qwen3", messages=messages, stream=True))
    message = result.message
    assert (result.raised, len(result.received)) == (None, 2)  # the SDK ends without complaint
    assert [OllamaAdapter().payload(part) for part in result.received] == CHAT_LINES
    assert (message.status, message.finish_reason, message.text, message.reasoning) == (
        Status.INTERRUPTED, None, "Hi", "Hmm."
    )


def test_a_done_line_without_a_reason_is_interrupted() -> None:
    done = {"model": "qwen3", "created_at": "2025-01-01T00:00:02Z",
            "message": {"role": "assistant", "content": ""}, "done": True, "eval_count": 1}
    client = ollama_client(ndjson(CHAT_LINES[1], done))
    stream = client.chat(model="qwen3", messages=[{"role": "user", "content": "hi"}],
                         stream=True)
    result = ollama_run(stream)
    message = result.message
    assert result.raised is None
    assert (message.status, message.finish_reason, message.end_marker) == (
        Status.INTERRUPTED, None, "done"
    )


def test_an_error_status_with_an_empty_body_interrupts_with_the_status() -> None:
    client = ollama_client(b"", status=502)
    stream = client.chat(model="qwen3", messages=[{"role": "user", "content": "hi"}],
                         stream=True)
    result = ollama_run(stream)
    message = result.message
    assert isinstance(result.raised, ollama.ResponseError)
    assert (result.raised.error, result.raised.status_code) == ("", 502)
    error = message.error
    assert isinstance(error, UpstreamStatusError)
    assert (message.status, error.status, error.retryable) == (Status.INTERRUPTED, 502, True)


def test_a_broken_connection_interrupts() -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        def lines() -> Iterator[bytes]:
            yield ndjson(CHAT_LINES[1])
            raise httpx.ReadError("connection reset by peer")

        return httpx.Response(200, content=lines())

    client = ollama.Client(host="http://test", transport=httpx.MockTransport(respond))
    stream = client.chat(model="qwen3", messages=[{"role": "user", "content": "hi"}],
                         stream=True)
    result = ollama_run(stream)
    message = result.message
    assert isinstance(result.raised, httpx.ReadError)
    assert (message.status, message.text) == (Status.INTERRUPTED, "Hi")
    assert isinstance(message.error, TransportError)


@pytest.mark.anyio
async def test_an_unawaited_async_chat_is_refused_clearly() -> None:
    client = ollama.AsyncClient(host="http://test")
    call = client.chat(model="qwen3", messages=[{"role": "user", "content": "hi"}], stream=True)
    with pytest.raises(TypeError, match=r"pass `await client\.chat"):
        from_ollama(call)  # type: ignore[call-overload]
    await client._client.aclose()


def test_gemini_malformed_json_fails_with_a_payload_error() -> None:
    good = json.dumps({"candidates": [{"content": {"role": "model", "parts": [{"text": "你好"}]},
                                       "index": 0}]})
    result = gemini_run(f"data: {good}\n\ndata: {{not json\n\n".encode())
    message = result.message
    assert isinstance(result.raised, genai_errors.UnknownApiResponseError)
    assert (len(result.received), message.text, message.status) == (1, "你好", Status.FAILED)
    assert isinstance(message.error, PayloadError)
    assert message.error.__cause__ is result.raised


def test_ollama_malformed_json_fails_with_a_payload_error() -> None:
    good = json.dumps({"model": "m", "created_at": "2026-01-01T00:00:00Z",
                       "message": {"role": "assistant", "content": "你好"}, "done": False})
    client = ollama_client(f"{good}\n{{not json\n".encode())
    result = ollama_run(
        client.chat(model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
    message = result.message
    assert isinstance(result.raised, json.JSONDecodeError)
    assert (len(result.received), message.text, message.status) == (1, "你好", Status.FAILED)
    assert isinstance(message.error, PayloadError)
    assert message.error.__cause__ is result.raised
