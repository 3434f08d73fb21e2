"""What from_gemini and from_ollama do alike, over the real SDKs against the mock upstream.

Every test runs four times: each SDK (``GEMINI`` and ``OLLAMA``, from their own test files),
with its sync client in a worker thread and its async client on the loop. The expected text comes
from the mock's plan (``reply_deltas``); the raw finish reasons and the exception a cut raises are
each SDK's own, named in its ``SDKStreams``.
"""

from __future__ import annotations

import pytest
from tests.integration.test_sdk_gemini import GEMINI
from tests.integration.test_sdk_ollama import OLLAMA
from tests.sdk_runs import Runner, SDKStreams, ending

from unbroken.errors import TransportError
from unbroken.finish import FinishReason, Status
from unbroken.message import ToolCall
from unbroken.mock import reply_deltas, reply_text

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture(params=[GEMINI, OLLAMA], ids=lambda sdk: sdk.name)
def sdk(request: pytest.FixtureRequest) -> SDKStreams:
    chosen: SDKStreams = request.param
    return chosen


@pytest.fixture(params=["sync", "async"])
def run(sdk: SDKStreams, request: pytest.FixtureRequest) -> Runner:
    return sdk.runner(request.param)


async def test_a_length_stop_truncates(mock_server: str, sdk: SDKStreams, run: Runner) -> None:
    result = await run(mock_server, f"seed={sdk.seed}; tokens={sdk.tokens}; finish=length")
    assert result.raised is None
    assert ending(result.message) == (Status.TRUNCATED, FinishReason.LENGTH, sdk.length_reason)
    assert result.message.text == reply_text(sdk.seed, sdk.tokens)
    assert result.message.error is None


async def test_a_tool_call_completes_with_tool_calls(
    mock_server: str, sdk: SDKStreams, run: Runner
) -> None:
    result = await run(mock_server, f"seed={sdk.seed}; tokens=3; finish=tool_calls")
    message = result.message
    assert ending(message) == (Status.COMPLETED, FinishReason.TOOL_CALLS, sdk.stop_reason)
    assert message.text == reply_text(sdk.seed, 3)
    assert message.tool_calls == [
        ToolCall(id=None, name="get_weather", arguments='{"city":"東京 🌧","unit":"celsius"}',
                 value={"city": "東京 🌧", "unit": "celsius"})
    ]


@pytest.mark.parametrize("mid", [False, True])
async def test_an_upstream_cut_interrupts_and_keeps_the_exact_prefix(
    mock_server: str, sdk: SDKStreams, run: Runner, mid: bool
) -> None:
    # Gemini has no end marker; for Ollama the cut comes before its "done" line.
    scenario = f"seed={sdk.seed}; tokens={sdk.tokens}; drop_after=5"
    result = await run(mock_server, scenario + ("; drop_mid=1" if mid else ""))
    assert isinstance(result.raised, sdk.cut_error)  # propagated unchanged
    assert len(result.received) == 5
    message = result.message
    assert ending(message) == (Status.INTERRUPTED, None, None)
    assert message.text == "".join(reply_deltas(sdk.seed, sdk.tokens)[:5])
    assert message.last_seq == 5
    assert isinstance(message.error, TransportError)
    assert message.error.__cause__ is result.raised


async def test_leaving_the_loop_early_cancels(
    mock_server: str, sdk: SDKStreams, run: Runner
) -> None:
    result = await run(mock_server, f"seed={sdk.seed}; tokens={sdk.tokens}", stop_after=4)
    assert result.raised is None
    message = result.message
    assert ending(message) == (Status.CANCELLED, None, None)
    assert message.text == "".join(reply_deltas(sdk.seed, sdk.tokens)[:4])
    assert message.last_seq == 4
    # The SDK's generator was closed too (no frame left), so its HTTP response is released.
    stream = result.tracked.stream
    assert (stream.gi_frame if hasattr(stream, "gi_frame") else stream.ag_frame) is None
