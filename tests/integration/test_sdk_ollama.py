"""from_ollama over the real ollama SDK (Client and AsyncClient) against the mock upstream.

Every test runs twice: the sync client in a worker thread, and the async client on the loop.
These run on ``/api/chat``; ``/api/generate`` is covered in
``tests/unit/test_sdk_gemini_ollama.py`` on fixed bodies and, through the proxy, in
``test_proxy_ollama_generate.py``. Ollama has no content filter, so no
stream here ends ``filtered``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import httpx
import ollama
import pytest

from unbroken import from_ollama
from unbroken.errors import ProviderError, TransportError, UpstreamStatusError
from unbroken.events import Usage
from unbroken.finish import FinishReason, Status
from unbroken.message import Message, ToolCall
from unbroken.mock import reply_deltas, reply_text
from unbroken.sdk import AsyncTrackedStream, TrackedStream

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SEED, TOKENS = 5, 12
DELTAS = reply_deltas(SEED, TOKENS)
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
MODEL = "llama-mock"
RUNNER_ERROR = "an error was encountered while running the model: unexpected EOF"


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """What one stream gave: the SDK's objects, the message, and what the loop raised."""

    parts: list[Any]
    message: Message
    raised: Exception | None
    tracked: Any


Runner = Callable[..., Awaitable[Run]]


def run_sync(base_url: str, scenario: str, stop_after: int | None = None) -> Run:
    parts: list[Any] = []
    raised: Exception | None = None
    with ollama.Client(host=base_url, headers={"Unbroken-Mock": scenario}) as client:
        tracked = from_ollama(client.chat(model=MODEL, messages=MESSAGES, stream=True))
        assert isinstance(tracked, TrackedStream)
        try:
            for part in tracked:  # leaving this loop closes it (CPython finalizes at once)
                parts.append(part)
                if len(parts) == stop_after:
                    break
        except Exception as exc:
            raised = exc
    return Run(parts=parts, message=tracked.message, raised=raised, tracked=tracked)


async def run_async(base_url: str, scenario: str, stop_after: int | None = None) -> Run:
    parts: list[Any] = []
    raised: Exception | None = None
    async with ollama.AsyncClient(host=base_url, headers={"Unbroken-Mock": scenario}) as client:
        stream = await client.chat(model=MODEL, messages=MESSAGES, stream=True)
        async with from_ollama(stream) as tracked:
            assert isinstance(tracked, AsyncTrackedStream)
            try:
                async for part in tracked:
                    parts.append(part)
                    if len(parts) == stop_after:
                        break
            except Exception as exc:
                raised = exc
    return Run(parts=parts, message=tracked.message, raised=raised, tracked=tracked)


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
    assert len(result.parts) == TOKENS + 1
    assert all(type(part) is ollama.ChatResponse for part in result.parts)
    assert "".join(part.message.content or "" for part in result.parts) == reply_text(
        SEED, TOKENS
    )
    message = result.message
    assert message.text == reply_text(SEED, TOKENS)
    assert ending(message) == (Status.COMPLETED, FinishReason.STOP, "stop")
    assert message.usage == Usage(seq=TOKENS + 1, input_tokens=12, output_tokens=TOKENS)
    assert (message.model, message.end_marker, message.last_seq) == (MODEL, "done", TOKENS + 1)
    assert (message.error, message.tool_calls, message.warnings) == (None, [], [])


async def test_length_truncates(mock_server: str, run: Runner) -> None:
    result = await run(mock_server, f"seed={SEED}; tokens={TOKENS}; finish=length")
    assert result.raised is None
    assert ending(result.message) == (Status.TRUNCATED, FinishReason.LENGTH, "length")
    assert result.message.text == reply_text(SEED, TOKENS)


async def test_stop_after_tool_calls_completes_with_tool_calls(
    mock_server: str, run: Runner
) -> None:
    result = await run(mock_server, f"seed={SEED}; tokens=3; finish=tool_calls")
    message = result.message
    assert ending(message) == (Status.COMPLETED, FinishReason.TOOL_CALLS, "stop")
    assert message.text == reply_text(SEED, 3)
    assert message.tool_calls == [
        ToolCall(id=None, name="get_weather", arguments='{"city":"東京 🌧","unit":"celsius"}',
                 value={"city": "東京 🌧", "unit": "celsius"})
    ]


@pytest.mark.parametrize("mid", [False, True])
async def test_an_upstream_cut_before_done_interrupts_and_keeps_the_exact_prefix(
    mock_server: str, run: Runner, mid: bool
) -> None:
    scenario = f"seed={SEED}; tokens={TOKENS}; drop_after=5" + ("; drop_mid=1" if mid else "")
    result = await run(mock_server, scenario)
    assert isinstance(result.raised, httpx.RemoteProtocolError)  # the package reads with httpx
    assert len(result.parts) == 5
    message = result.message
    assert ending(message) == (Status.INTERRUPTED, None, None)
    assert message.text == "".join(DELTAS[:5])
    assert message.last_seq == 5
    assert isinstance(message.error, TransportError)
    assert message.error.__cause__ is result.raised


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


@pytest.mark.parametrize("status", [429, 503])
async def test_an_error_status_before_the_stream_interrupts_with_the_status(
    mock_server: str, run: Runner, status: int
) -> None:
    # As unbroken.stream ends on a final status: interrupted, retryable for 429 and 5xx (the
    # error line alone would not say so).
    result = await run(mock_server, f"seed={SEED}; tokens={TOKENS}; status={status}")
    assert isinstance(result.raised, ollama.ResponseError)
    assert (result.raised.error, result.raised.status_code) == (f"mock status {status}", status)
    assert result.parts == []
    message = result.message
    assert ending(message) == (Status.INTERRUPTED, None, None)
    assert message.text == ""
    error = message.error
    assert isinstance(error, UpstreamStatusError)
    assert (error.status, error.body, error.retryable, error.__cause__) == (
        status, f"mock status {status}", True, result.raised)