"""from_gemini over the real google-genai SDK (sync and async clients) against the mock upstream.

Every test runs twice: the sync client in a worker thread, and the async client on the loop.
The expected values come from the mock's plan (``reply_deltas``, its usage and error bodies).
What Gemini does as Ollama does (a length stop, a tool call, a cut, leaving early) is tested
for both in ``test_sdk_streams.py``, with ``GEMINI`` below.
"""

from __future__ import annotations

import json

import httpx2
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from tests.sdk_runs import Run, Runner, SDKStreams, drain, drain_async, ending, run_fixture

from unbroken import from_gemini
from unbroken.errors import ProviderError, UpstreamStatusError
from unbroken.events import Usage
from unbroken.finish import FinishReason, Status
from unbroken.mock import reply_deltas, reply_text
from unbroken.mock.wire_gemini import INTERNAL_MESSAGE
from unbroken.sdk import AsyncTrackedStream, TrackedStream

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SEED, TOKENS = 7, 12
DELTAS = reply_deltas(SEED, TOKENS)
MODEL = "gemini-mock"


def options(base_url: str, scenario: str) -> genai_types.HttpOptions:
    return genai_types.HttpOptions(
        base_url=base_url,
        headers={"Unbroken-Mock": scenario},
        retry_options=genai_types.HttpRetryOptions(attempts=1),
    )


def run_sync(base_url: str, scenario: str, stop_after: int | None = None) -> Run:
    with genai.Client(api_key="fake-key", http_options=options(base_url, scenario)) as client:
        tracked = from_gemini(client.models.generate_content_stream(model=MODEL, contents="hi"))
        assert isinstance(tracked, TrackedStream)
        return drain(tracked, stop_after)


async def run_async(base_url: str, scenario: str, stop_after: int | None = None) -> Run:
    client = genai.Client(api_key="fake-key", http_options=options(base_url, scenario))
    async with client.aio as aio:
        stream = await aio.models.generate_content_stream(model=MODEL, contents="hi")
        tracked = from_gemini(stream)
        assert isinstance(tracked, AsyncTrackedStream)
        result = await drain_async(tracked, stop_after)
    client.close()
    return result


GEMINI = SDKStreams(name="gemini", run_sync=run_sync, run_async=run_async, seed=SEED,
                    tokens=TOKENS, stop_reason="STOP", length_reason="MAX_TOKENS",
                    cut_error=httpx2.RemoteProtocolError)


run = run_fixture(GEMINI)


async def test_a_whole_stream_yields_the_sdk_objects_and_completes(
    mock_server: str, run: Runner
) -> None:
    result = await run(mock_server, f"seed={SEED}; tokens={TOKENS}")
    assert result.raised is None
    assert len(result.received) == TOKENS + 1
    assert all(type(chunk) is genai_types.GenerateContentResponse for chunk in result.received)
    assert "".join(chunk.text or "" for chunk in result.received) == reply_text(SEED, TOKENS)
    message = result.message
    assert message.text == reply_text(SEED, TOKENS)
    assert ending(message) == (Status.COMPLETED, FinishReason.STOP, "STOP")
    assert message.usage == Usage(seq=TOKENS + 1, input_tokens=12, output_tokens=TOKENS,
                                  total_tokens=12 + TOKENS)
    assert (message.id, message.model) == (result.received[0].response_id, MODEL)
    assert (message.last_seq, message.error, message.tool_calls) == (TOKENS + 1, None, [])
    assert message.warnings == []  # Gemini has no end marker: its absence is no warning


async def test_safety_filters(mock_server: str, run: Runner) -> None:
    result = await run(mock_server, f"seed={SEED}; tokens={TOKENS}; finish=content_filter")
    assert result.raised is None
    assert ending(result.message) == (Status.FILTERED, FinishReason.CONTENT_FILTER, "SAFETY")
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
    assert result.received == []
    message = result.message
    assert ending(message) == (Status.INTERRUPTED, None, None)
    assert message.text == ""
    error = message.error
    assert isinstance(error, UpstreamStatusError)
    assert (error.status, error.retryable, error.__cause__) == (status, True, result.raised)
    assert json.loads(error.body)["error"]["message"] == f"mock status {status}"

async def test_streamed_function_call_arguments_reach_the_message_whole(
    mock_server: str, run: Runner
) -> None:
    # Vertex AI's streamFunctionCallArguments, as the mock sends it (partial_args=1): the
    # SDK's objects carry partialArgs, which the wrapper hands on as the wire had them.
    result = await run(mock_server, f"seed={SEED}; tokens=3; finish=tool_calls; partial_args=1")
    assert result.raised is None
    message = result.message
    assert ending(message) == (Status.COMPLETED, FinishReason.TOOL_CALLS, "STOP")
    [call] = message.tool_calls
    assert (call.name, call.arguments) == ("get_weather", '{"city":"東京 🌧","unit":"celsius"}')
    assert message.warnings == []
