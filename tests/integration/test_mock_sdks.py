"""The official SDKs, pointed at the mock with fake keys, parse its streams exactly.

Each SDK is the reference for its provider's wire format: a stream it cannot parse, or parses
into different text, is a mock bug.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import ollama
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from unbroken.mock import reply_deltas, reply_text

pytestmark = pytest.mark.integration

MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
TOOL_INPUT = {"city": "東京 🌧", "unit": "celsius"}
TOOL_ARGUMENTS = '{"city": "東京 🌧", "unit": "celsius"}'


def counts(base_url: str) -> Any:
    return httpx2.get(base_url + "/_mock/requests", timeout=5).json()


def scenario(text: str) -> dict[str, str]:
    return {"Unbroken-Mock": text}


# --- OpenAI Chat Completions ---------------------------------------------------------------


@pytest.fixture
def openai_client(mock_server: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key="sk-fake", base_url=mock_server + "/v1", max_retries=0) as client:
        yield client


def test_openai_chat_stream(openai_client: openai.OpenAI, mock_server: str) -> None:
    stream = openai_client.chat.completions.create(
        model="gpt-mock", messages=MESSAGES, stream=True,
        stream_options={"include_usage": True}, extra_headers=scenario("seed=4; tokens=30"),
    )
    chunks = list(stream)
    assert len(chunks) == 30 + 3  # role, 30 deltas, finish, usage ([DONE] ends the iteration)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == reply_text(4, 30)
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 30
    assert counts(mock_server) == {"generations": {"/v1/chat/completions": 1}, "resumes": {}}


@pytest.mark.parametrize("finish", ["length", "content_filter"])
def test_openai_chat_finish_reasons(openai_client: openai.OpenAI, finish: str) -> None:
    completion = openai_client.chat.completions.create(
        model="gpt-mock", messages=MESSAGES, extra_headers=scenario(f"tokens=3; finish={finish}"))
    assert completion.choices[0].finish_reason == finish
    assert completion.choices[0].message.content == reply_text(0, 3)


def test_openai_chat_stream_helper_assembles_the_tool_call(openai_client: openai.OpenAI) -> None:
    with openai_client.chat.completions.stream(
        model="gpt-mock", messages=MESSAGES,
        extra_headers=scenario("tokens=5; finish=tool_calls; split_utf8=1"),
    ) as stream:
        completion = stream.get_final_completion()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == reply_text(0, 5)
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert (call.function.name, call.function.arguments) == ("get_weather", TOOL_ARGUMENTS)


def test_openai_chat_drop_raises_after_the_frames_before_it(openai_client: openai.OpenAI) -> None:
    received = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in openai_client.chat.completions.create(
            model="gpt-mock", messages=MESSAGES, stream=True,
            extra_headers=scenario("tokens=6; drop_after=4; drop_mid=1"),
        ):
            received.append(chunk.choices[0].delta.content)
    assert received == ["", *reply_deltas(0, 6)[:3]]


def test_openai_chat_error_chunk_raises(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIError, match="The server had an error"):
        for _ in openai_client.chat.completions.create(
            model="gpt-mock", messages=MESSAGES, stream=True, extra_headers=scenario("error_at=3")
        ):
            pass


def test_openai_rate_limit_then_retry(openai_client: openai.OpenAI, mock_server: str) -> None:
    client = openai_client
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="m", messages=MESSAGES,
                                       extra_headers=scenario("status=429"))
    assert caught.value.status_code == 429
    retrying = client.with_options(max_retries=2)
    completion = retrying.chat.completions.create(
        model="m", messages=MESSAGES,
        extra_headers=scenario("tokens=2; status=503; status_times=2; retry_after=0.01"),
    )
    assert completion.choices[0].message.content == reply_text(0, 2)
    assert counts(mock_server) == {"generations": {"/v1/chat/completions": 1}, "resumes": {}}


# --- OpenAI Responses ----------------------------------------------------------------------


def test_openai_responses_stream_helper(openai_client: openai.OpenAI) -> None:
    with openai_client.responses.stream(
        model="gpt-mock", input="hi", extra_headers=scenario("seed=8; tokens=25; pings=1")
    ) as stream:
        response = stream.get_final_response()
    assert response.status == "completed"
    assert response.output_text == reply_text(8, 25)
    assert response.usage is not None
    assert response.usage.output_tokens == 25


def test_openai_responses_events(openai_client: openai.OpenAI) -> None:
    events = list(openai_client.responses.create(
        model="gpt-mock", input="hi", stream=True, extra_headers=scenario("tokens=3; finish=length")
    ))
    assert [event.sequence_number for event in events] == list(range(11))
    assert [event.type for event in events][:4] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added",
    ]
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details is not None
    assert last.response.incomplete_details.reason == "max_output_tokens"


def test_openai_responses_tool_call_and_error_event(openai_client: openai.OpenAI) -> None:
    with openai_client.responses.stream(
        model="gpt-mock", input="hi", extra_headers=scenario("tokens=2; finish=tool_calls")
    ) as stream:
        response = stream.get_final_response()
    call = response.output[1]
    assert call.type == "function_call"
    assert (call.name, call.arguments) == ("get_weather", TOOL_ARGUMENTS)
    events = list(openai_client.responses.create(
        model="gpt-mock", input="hi", stream=True, extra_headers=scenario("tokens=2; error_at=6")
    ))
    assert len(events) == 6
    error = events[-1]
    assert error.type == "error"
    assert (error.code, error.sequence_number) == ("server_error", 5)


def test_openai_background_resume_with_the_sdk(openai_client: openai.OpenAI,
                                               mock_server: str) -> None:
    events: list[Any] = []
    with pytest.raises(openai.APIConnectionError):
        for event in openai_client.responses.create(
            model="gpt-mock", input="hi", stream=True, background=True,
            extra_headers=scenario("seed=2; tokens=6; drop_after=7; drop_mid=1"),
        ):
            events.append(event)
    assert [event.sequence_number for event in events] == list(range(7))
    assert events[0].type == "response.created"
    response_id = events[0].response.id
    rest = list(openai_client.responses.retrieve(
        response_id, stream=True, starting_after=events[-1].sequence_number))
    assert [event.sequence_number for event in rest] == list(range(7, 14))
    text = "".join(event.delta for event in events + rest
                   if event.type == "response.output_text.delta")
    assert text == reply_text(2, 6)
    assert rest[-1].type == "response.completed"
    assert counts(mock_server) == {"generations": {"/v1/responses": 1},
                                   "resumes": {"/v1/responses": 1}}


# --- Anthropic -----------------------------------------------------------------------------


@pytest.fixture
def anthropic_client(mock_server: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(api_key="fake", base_url=mock_server, max_retries=0) as client:
        yield client


def test_anthropic_stream_helper(anthropic_client: anthropic.Anthropic) -> None:
    with anthropic_client.messages.stream(
        model="claude-mock", max_tokens=100, messages=MESSAGES,
        extra_headers=scenario("seed=6; tokens=30; finish=tool_calls; pings=1; split_utf8=1"),
    ) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "text"
    assert message.content[0].text == reply_text(6, 30)
    assert message.content[1].type == "tool_use"
    assert (message.content[1].name, message.content[1].input) == ("get_weather", TOOL_INPUT)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (12, 30)


@pytest.mark.parametrize(("finish", "stop_reason"),
                         [("length", "max_tokens"), ("content_filter", "refusal")])
def test_anthropic_stop_reasons(anthropic_client: anthropic.Anthropic, finish: str,
                                stop_reason: str) -> None:
    message = anthropic_client.messages.create(
        model="claude-mock", max_tokens=100, messages=MESSAGES,
        extra_headers=scenario(f"tokens=3; finish={finish}"))
    assert message.stop_reason == stop_reason
    assert message.content[0].type == "text"
    assert message.content[0].text == reply_text(0, 3)


def test_anthropic_error_event_and_drop(anthropic_client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        for _ in anthropic_client.messages.create(
            model="claude-mock", max_tokens=100, messages=MESSAGES, stream=True,
            extra_headers=scenario("tokens=4; error_at=5"),
        ):
            pass
    assert caught.value.body == {"type": "error",
                                 "error": {"type": "overloaded_error", "message": "Overloaded"}}
    texts = []
    # anthropic < 2.17 lets httpx2's own error through; 2.17 wraps it in APIConnectionError.
    with pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError),
                       match="incomplete chunked read"):
        for event in anthropic_client.messages.create(
            model="claude-mock", max_tokens=100, messages=MESSAGES, stream=True,
            extra_headers=scenario("tokens=4; drop_after=5"),
        ):
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                texts.append(event.delta.text)
    assert texts == reply_deltas(0, 4)[:2]


def test_anthropic_rate_limit(anthropic_client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.RateLimitError) as caught:
        anthropic_client.messages.create(model="claude-mock", max_tokens=100, messages=MESSAGES,
                                         extra_headers=scenario("status=429"))
    assert caught.value.status_code == 429
    assert caught.value.body == {"type": "error", "error": {"type": "rate_limit_error",
                                                            "message": "mock status 429"}}


async def _anthropic_async_text(base_url: str, text: str) -> str:
    async with anthropic.AsyncAnthropic(api_key="fake", base_url=base_url,
                                        max_retries=0) as client:
        async with client.messages.stream(model="claude-mock", max_tokens=100,
                                          messages=MESSAGES, extra_headers=scenario(text)
                                          ) as stream:
            return await stream.get_final_text()


@pytest.mark.anyio
async def test_anthropic_async_client(mock_server: str) -> None:
    assert await _anthropic_async_text(mock_server, "seed=1; tokens=10") == reply_text(1, 10)


# --- Gemini --------------------------------------------------------------------------------


def gemini_stream(base_url: str, text: str, api_version: str | None = None
                  ) -> list[genai_types.GenerateContentResponse]:
    options = genai_types.HttpOptions(base_url=base_url, headers=scenario(text),
                                      api_version=api_version)
    with genai.Client(api_key="fake", http_options=options) as client:
        return list(client.models.generate_content_stream(model="gemini-mock", contents="hi"))


def gemini_whole(base_url: str, text: str) -> genai_types.GenerateContentResponse:
    options = genai_types.HttpOptions(base_url=base_url, headers=scenario(text))
    with genai.Client(api_key="fake", http_options=options) as client:
        return client.models.generate_content(model="gemini-mock", contents="hi")


@pytest.mark.parametrize("api_version", [None, "v1beta"])
def test_gemini_stream(mock_server: str, api_version: str | None) -> None:
    chunks = gemini_stream(mock_server, "seed=3; tokens=30; split_utf8=1", api_version)
    assert len(chunks) == 31
    assert "".join(chunk.text or "" for chunk in chunks) == reply_text(3, 30)
    final = chunks[-1]
    assert final.candidates is not None
    assert final.candidates[0].finish_reason == genai_types.FinishReason.STOP
    assert final.usage_metadata is not None
    assert final.usage_metadata.total_token_count == 42
    version = api_version or "v1"
    path = f"/{version}/models/gemini-mock:streamGenerateContent"
    assert counts(mock_server) == {"generations": {path: 1}, "resumes": {}}


@pytest.mark.parametrize(("finish", "reason"), [
    ("length", genai_types.FinishReason.MAX_TOKENS),
    ("content_filter", genai_types.FinishReason.SAFETY),
    ("error", genai_types.FinishReason.MALFORMED_FUNCTION_CALL),
])
def test_gemini_finish_reasons(mock_server: str, finish: str,
                               reason: genai_types.FinishReason) -> None:
    candidates = gemini_stream(mock_server, f"tokens=3; finish={finish}")[-1].candidates
    assert candidates is not None
    assert candidates[0].finish_reason == reason


def test_gemini_tool_call_and_whole_body(mock_server: str) -> None:
    calls = gemini_stream(mock_server, "tokens=3; finish=tool_calls")[-1].function_calls
    assert calls is not None
    assert (calls[0].name, calls[0].args) == ("get_weather", TOOL_INPUT)
    assert gemini_whole(mock_server, "seed=5; tokens=9").text == reply_text(5, 9)


def test_gemini_errors(mock_server: str) -> None:
    with pytest.raises(genai_errors.ServerError) as server_error:
        gemini_stream(mock_server, "tokens=3; error_at=3")
    assert server_error.value.code == 500
    with pytest.raises(genai_errors.ClientError) as client_error:
        gemini_whole(mock_server, "status=429")
    assert client_error.value.code == 429
    assert client_error.value.status == "RESOURCE_EXHAUSTED"
    with pytest.raises(httpx2.RemoteProtocolError, match="incomplete chunked read"):
        gemini_stream(mock_server, "tokens=3; drop_after=2")


# --- Ollama --------------------------------------------------------------------------------


def ollama_stream(base_url: str, text: str) -> list[ollama.ChatResponse]:
    with ollama.Client(host=base_url, headers=scenario(text)) as client:
        return list(client.chat(model="llama-mock", messages=MESSAGES, stream=True))


def ollama_whole(base_url: str, text: str) -> ollama.ChatResponse:
    with ollama.Client(host=base_url, headers=scenario(text)) as client:
        whole: ollama.ChatResponse = client.chat(model="llama-mock", messages=MESSAGES,
                                                 stream=False)
        return whole


def test_ollama_stream(mock_server: str) -> None:
    parts = ollama_stream(mock_server, "seed=9; tokens=30; split_utf8=1")
    assert len(parts) == 31
    assert "".join(part.message.content or "" for part in parts) == reply_text(9, 30)
    assert parts[-1].done is True
    assert parts[-1].done_reason == "stop"
    assert parts[-1].eval_count == 30
    assert counts(mock_server) == {"generations": {"/api/chat": 1}, "resumes": {}}


def test_ollama_whole_body_and_tool_call(mock_server: str) -> None:
    whole = ollama_whole(mock_server, "tokens=4; finish=length")
    assert whole.message.content == reply_text(0, 4)
    assert whole.done_reason == "length"
    parts = ollama_stream(mock_server, "tokens=2; finish=tool_calls")
    calls = parts[-2].message.tool_calls
    assert calls is not None
    assert (calls[0].function.name, dict(calls[0].function.arguments)) == ("get_weather",
                                                                           TOOL_INPUT)
    assert parts[-1].done_reason == "stop"


def test_ollama_errors(mock_server: str) -> None:
    with pytest.raises(ollama.ResponseError, match="unexpected EOF"):
        ollama_stream(mock_server, "tokens=3; error_at=2")
    with pytest.raises(ollama.ResponseError) as caught:
        ollama_whole(mock_server, "status=503")
    assert caught.value.status_code == 503
    # The ollama package reads with httpx (not httpx2).
    with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
        ollama_stream(mock_server, "tokens=3; drop_after=2; drop_mid=1")
