"""from_ollama over the real ollama SDK (Client and AsyncClient) against the mock upstream.

Every test runs twice: the sync client in a worker thread, and the async client on the loop.
These run on ``/api/chat``; ``/api/generate`` is covered in
``tests/unit/test_sdk_gemini_ollama.py`` on fixed bodies and, through the proxy, in
``test_proxy_ollama_generate.py``. Ollama has no content filter, so no
stream here ends ``filtered``. What Ollama does as Gemini does (a length stop, a tool call, a
cut before ``done``, leaving early) is tested for both in ``test_sdk_streams.py``, with
``OLLAMA`` below.
"""

from __future__ import annotations

from typing import Any

import httpx
import ollama
import pytest
from tests.sdk_runs import Run, Runner, SDKStreams, drain, drain_async, ending, run_fixture

from unbroken import from_ollama
from unbroken.errors import ProviderError, UpstreamStatusError
from unbroken.events import Usage
from unbroken.finish import FinishReason, Status
from unbroken.mock import reply_deltas, reply_text
from unbroken.sdk import AsyncTrackedStream, TrackedStream

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SEED, TOKENS = 5, 12
DELTAS = reply_deltas(SEED, TOKENS)
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
MODEL = "llama-mock"
RUNNER_ERROR = "an error was encountered while running the model: unexpected EOF"


def run_sync(base_url: str, scenario: str, stop_after: int | None = None) -> Run:
    with ollama.Client(host=base_url, headers={"Unbroken-Mock": scenario}) as client:
        tracked = from_ollama(client.chat(model=MODEL, messages=MESSAGES, stream=True))
        assert isinstance(tracked, TrackedStream)
        return drain(tracked, stop_after)


async def run_async(base_url: str, scenario: str, stop_after: int | None = None) -> Run:
    async with ollama.AsyncClient(host=base_url, headers={"Unbroken-Mock": scenario}) as client:
        tracked = from_ollama(await client.chat(model=MODEL, messages=MESSAGES, stream=True))
        assert isinstance(tracked, AsyncTrackedStream)
        return await drain_async(tracked, stop_after)


# The package reads with httpx, so a cut raises httpx's error, not httpx2's.
OLLAMA = SDKStreams(name="ollama", run_sync=run_sync, run_async=run_async, seed=SEED,
                    tokens=TOKENS, stop_reason="stop", length_reason="length",
                    cut_error=httpx.RemoteProtocolError)


run = run_fixture(OLLAMA)


async def test_a_whole_stream_yields_the_sdk_objects_and_completes(
    mock_server: str, run: Runner
) -> None:
    result = await run(mock_server, f"seed={SEED}; tokens={TOKENS}")
    assert result.raised is None
    assert len(result.received) == TOKENS + 1
    assert all(type(part) is ollama.ChatResponse for part in result.received)
    assert "".join(part.message.content or "" for part in result.received) == reply_text(
        SEED, TOKENS
    )
    message = result.message
    assert message.text == reply_text(SEED, TOKENS)
    assert ending(message) == (Status.COMPLETED, FinishReason.STOP, "stop")
    assert message.usage == Usage(seq=TOKENS + 1, input_tokens=12, output_tokens=TOKENS)
    assert (message.model, message.end_marker, message.last_seq) == (MODEL, "done", TOKENS + 1)
    assert (message.error, message.tool_calls, message.warnings) == (None, [], [])


@pytest.mark.parametrize(("scenario", "kept"), [
    (f"seed={SEED}; tokens={TOKENS}; error_at=4", 3),  # an error line replaces line 4
    (f"seed={SEED}; tokens={TOKENS}; finish=error", TOKENS),  # an error line instead of done
])
async def test_an_error_line_fails_with_the_providers_message(
    mock_server: str, run: Runner, scenario: str, kept: int
) -> None:
    result = await run(mock_server, scenario)
    assert isinstance(result.raised, ollama.ResponseError)
    assert (result.raised.error, result.raised.status_code) == (RUNNER_ERROR, -1)
    message = result.message
    assert ending(message) == (Status.FAILED, FinishReason.ERROR, "error")
    assert message.text == "".join(DELTAS[:kept])
    assert isinstance(message.error, ProviderError)
    event = message.error.event
    assert (event.seq, event.type, event.message, event.retryable) == (
        kept + 1, "error", RUNNER_ERROR, False
    )


@pytest.mark.parametrize("status", [429, 503])
async def test_an_error_status_before_the_stream_interrupts_with_the_status(
    mock_server: str, run: Runner, status: int
) -> None:
    # As unbroken.stream ends on a final status: interrupted, retryable for 429 and 5xx (the
    # error line alone would not say so).
    result = await run(mock_server, f"seed={SEED}; tokens={TOKENS}; status={status}")
    assert isinstance(result.raised, ollama.ResponseError)
    assert (result.raised.error, result.raised.status_code) == (f"mock status {status}", status)
    assert result.received == []
    message = result.message
    assert ending(message) == (Status.INTERRUPTED, None, None)
    assert message.text == ""
    error = message.error
    assert isinstance(error, UpstreamStatusError)
    assert (error.status, error.body, error.retryable, error.__cause__) == (
        status, f"mock status {status}", True, result.raised)