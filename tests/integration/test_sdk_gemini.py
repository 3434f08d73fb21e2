"""from_gemini over the real google-genai SDK (sync and async clients) against the mock upstream.

Every test runs twice: the sync client in a worker thread, and the async client on the loop.
The expected values come from the mock's plan (``reply_deltas``, its usage and error bodies).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import httpx2
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from unbroken import from_gemini
from unbroken.errors import ProviderError, TransportError, UpstreamStatusError
from unbroken.events import Usage
from unbroken.finish import FinishReason, Status
from unbroken.message import Message, ToolCall
from unbroken.mock import reply_deltas, reply_text
from unbroken.mock.wire_gemini import INTERNAL_MESSAGE
from unbroken.sdk import AsyncTrackedStream, TrackedStream

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SEED, TOKENS = 7, 12
DELTAS = reply_deltas(SEED, TOKENS)
MODEL = "gemini-mock"


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """What one stream gave: the SDK's objects, the message, and what the loop raised."""

    chunks: list[Any]
    message: Message
    raised: Exception | None
    tracked: Any


Runner = Callable[..., Awaitable[Run]]


def options(base_url: str, scenario: str) -> genai_types.HttpOptions:
    return genai_types.HttpOptions(
        base_url=base_url,
        headers={"Unbroken-Mock": scenario},
        retry_options=genai_types.HttpRetryOptions(attempts=1),
    )


def run_sync(base_url: str, scenario: str, stop_after: int | None = None) -> Run:
    chunks: list[Any] = []
    raised: Exception | None = None
    with genai.Client(api_key="fake-key", http_options=options(base_url, scenario)) as client:
        tracked = from_gemini(client.models.generate_content_stream(model=MODEL, contents="hi"))
        assert isinstance(tracked, TrackedStream)
        try:
            for chunk in tracked:  # leaving this loop closes it (CPython finalizes at once)
                chunks.append(chunk)
                if len(chunks) == stop_after:
                    break
        except Exception as exc:
            raised = exc
    return Run(chunks=chunks, message=tracked.message, raised=raised, tracked=tracked)


async def run_async(base_url: str, scenario: str, stop_after: int | None = None) -> Run:
    chunks: list[Any] = []
    raised: Exception | None = None
    client = genai.Client(api_key="fake-key", http_options=options(base_url, scenario))
    async with client.aio as aio:
        stream = await aio.models.generate_content_stream(model=MODEL, contents="hi")
        async with from_gemini(stream) as tracked:
            assert isinstance(tracked, AsyncTrackedStream)
            try:
                async for chunk in tracked:
                    chunks.append(chunk)
                    if len(chunks) == stop_after:
                        break
            except Exception as exc:
                raised = exc
    client.close()
    return Run(chunks=chunks, message=tracked.message, raised=raised, tracked=tracked)


@pytest.fixture(params=["sync", "async"])
def run(request: pytest.FixtureRequest) -> Runner:
    if request.param == "async":
        return run_async

    async def in_thread(base_url: str, scenario: str, stop_after: int | None = None) -> Run:
        return await anyio.to_thread.run_sync(partial(run_sync, base_url, scenario, stop_after))

    return in_thread


def ending(message: Message) -> tuple[Status, FinishReason | None, str | None]:
    return message.status, message.finish_reason, message.raw_finish_reason


async def test_a_whole_stream_yields_the_sdk_objects_and_completes(
    mock_server: str, run: Runner
) -> None:
    result = await run(mock_server, f"seed={SEED}; tokens={TOKENS}")
    assert result.raised is None
    assert len(result.chunks) == TOKENS + 1
    assert all(type(chunk) is genai_types.GenerateContentResponse for chunk in result.chunks)
    assert "".join(chunk.text or "" for chunk in result.chunks) == reply_text(SEED, TOKENS)
    message = result.message
    assert message.text == reply_text(SEED, TOKENS)
    assert ending(message) == (Status.COMPLETED, FinishReason.STOP, "STOP")
    assert message.usage == Usage(seq=TOKENS + 1, input_tokens=12, output_tokens=TOKENS,
                                  total_tokens=12 + TOKENS)
    assert (message.id, message.model) == (result.chunks[0].response_id, MODEL)
    assert (message.last_seq, message.error, message.tool_calls) == (TOKENS + 1, None, [])
    assert message.warnings == []  # Gemini has no end marker: its absence is no warning


@pytest.mark.parametrize(("finish", "expected"), [
    ("length", (Status.TRUNCATED, FinishReason.LENGTH, "MAX_TOKENS")),
    ("content_filter", (Status.FILTERED, FinishReason.CONTENT_FILTER, "SAFETY")),
])
async def test_max_tokens_truncates_and_safety_filters(
    mock_server: str, run: Runner, finish: str, expected: tuple[Status, FinishReason, str]
) -> None:
    result = await run(mock_server, f"seed={SEED}; tokens={TOKENS}; finish={finish}")
    assert result.raised is None
    assert ending(result.message) == expected
    assert result.message.text == reply_text(SEED, TOKENS)
    assert result.message.error is None


async def test_a_malformed_function_call_fails_without_an_exception(
    mock_server: str, run: Runner
) -> None:
    result = await run(mock_server, f"seed={SEED}; tokens=3; finish=error")
    assert result.raised is None  # an ordinary finish reason to the SDK
    message = result.message
    assert ending(message) == (Status.FAILED, FinishReason.ERROR, "MALFORMED_FUNCTION_CALL")
    assert message.text == reply_text(SEED, 3)
    assert isinstance(message.error, ProviderError)
    assert message.error.event.type == "MALFORMED_FUNCTION_CALL"


async def test_a_function_call_completes_with_tool_calls(mock_server: str, run: Runner) -> None:
    result = await run(mock_server, f"seed={SEED}; tokens=3; finish=tool_calls")
    message = result.message
    assert ending(message) == (Status.COMPLETED, FinishReason.TOOL_CALLS, "STOP")
    assert message.text == reply_text(SEED, 3)
    assert message.tool_calls == [
        ToolCall(id=None, name="get_weather", arguments='{"city":"東京 🌧","unit":"celsius"}',
                 value={"city": "東京 🌧", "unit": "celsius"})
    ]


@pytest.mark.parametrize("mid", [False, True])
async def test_an_upstream_cut_interrupts_and_keeps_the_exact_prefix(
    mock_server: str, run: Runner, mid: bool
) -> None:
    scenario = f"seed={SEED}; tokens={TOKENS}; drop_after=5" + ("; drop_mid=1" if mid else "")
    result = await run(mock_server, scenario)
    assert isinstance(result.raised, httpx2.RemoteProtocolError)  # propagated unchanged
    assert len(result.chunks) == 5
    message = result.message
    assert ending(message) == (Status.INTERRUPTED, None, None)
    assert message.text == "".join(DELTAS[:5])
    assert message.last_seq == 5
    assert isinstance(message.error, TransportError)
    assert message.error.__cause__ is result.raised


async def test_an_error_event_in_the_stream_fails_with_the_providers_message(
    mock_server: str, run: Runner
) -> None:
    result = await run(mock_server, f"seed={SEED}; tokens={TOKENS}; error_at=4")
    assert isinstance(result.raised, genai_errors.ServerError)
    assert (result.raised.code, result.raised.status) == (500, "INTERNAL")
    message = result.message
    assert ending(message) == (Status.FAILED, FinishReason.ERROR, "INTERNAL")
    assert message.text == "".join(DELTAS[:3])
    assert isinstance(message.error, ProviderError)
    event = message.error.event
    assert (event.seq, event.type, event.message, event.retryable) == (
        4, "INTERNAL", INTERNAL_MESSAGE, True
    )
    assert event.raw == {"error": {"code": 500, "message": INTERNAL_MESSAGE,
                                   "status": "INTERNAL"}}


async def test_leaving_the_loop_early_cancels(mock_server: str, run: Runner) -> None:
    result = await run(mock_server, f"seed={SEED}; tokens={TOKENS}", stop_after=4)
    assert result.raised is None
    message = result.message
    assert ending(message) == (Status.CANCELLED, None, None)
    assert message.text == "".join(DELTAS[:4])
    assert message.last_seq == 4
    # The SDK's generator was closed too (no frame left), so its HTTP response is released.
    stream = result.tracked.stream
    assert (stream.gi_frame if hasattr(stream, "gi_frame") else stream.ag_frame) is None


@pytest.mark.parametrize(("status", "sdk_error"), [
    (429, genai_errors.ClientError),
    (503, genai_errors.ServerError),
])
async def test_an_error_status_before_the_stream_interrupts_with_the_status(
    mock_server: str, run: Runner, status: int, sdk_error: type[Exception]
) -> None:
    # As unbroken.stream ends on a final status: interrupted, the error says which status.
    result = await run(mock_server, f"seed={SEED}; tokens={TOKENS}; status={status}")
    assert type(result.raised) is sdk_error
    assert result.chunks == []
    message = result.message
    assert ending(message) == (Status.INTERRUPTED, None, None)
    assert message.text == ""
    error = message.error
    assert isinstance(error, UpstreamStatusError)
    assert (error.status, error.retryable, error.__cause__) == (status, True, result.raised)
    assert json.loads(error.body)["error"]["message"] == f"mock status {status}"