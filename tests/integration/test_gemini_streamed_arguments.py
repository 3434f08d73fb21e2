"""Vertex AI's streamed function-call arguments from the mock (``partial_args=1``) under real
uvicorn: the call assembled whole; cut inside the call and resumed by ``Last-Event-ID``, the same
call with nothing written twice, and one generation."""

from __future__ import annotations

import json

import pytest
from tests.integration.test_client_support import (
    DRIVERS,
    LAYOUTS,
    mock_counts,
    reset_mock,
    run_stream,
)

from unbroken.events import ToolCallDelta
from unbroken.finish import FinishReason, Status
from unbroken.mock import reply_text

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

T = 3
GEMINI = LAYOUTS["gemini"]
SCENARIO = f"tokens={T}; finish=tool_calls; partial_args=1"
# Written from the mock's pieces (mock/wire_gemini.py STREAMED_CALL): $.city "東京 " + "🌧" + "",
# then $.unit "celsius" + "".
ARGUMENTS = '{"city":"東京 🌧","unit":"celsius"}'
FRAMES = T + 7  # T text frames, the named part, five pieces, the final chunk


@pytest.fixture
def mock(mock_server_session: str) -> str:
    return reset_mock(mock_server_session)


@pytest.mark.parametrize("driver", DRIVERS)
async def test_the_call_is_assembled_whole(mock: str, driver: str) -> None:
    run = await run_stream(driver, GEMINI.url(mock), dialect="gemini", scenario=SCENARIO)
    assert run.error is None
    message = run.message
    assert (message.status, message.finish_reason) == (Status.COMPLETED, FinishReason.TOOL_CALLS)
    assert message.text == reply_text(0, T)
    [call] = message.tool_calls
    assert (call.id, call.name, call.arguments) == (None, "get_weather", ARGUMENTS)
    assert call.value == json.loads(ARGUMENTS)
    assert message.last_seq == FRAMES
    # the caller saw the arguments arrive piece by piece (no empty piece but the named one)
    pieces = [e.arguments for e in run.events if isinstance(e, ToolCallDelta)]
    assert pieces == ["", '{"city":"東京 ', "🌧", '","unit":"celsius', '"}']


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("drop_after", [T + 1, T + 3, T + 6])
async def test_a_cut_inside_the_call_resumes_without_writing_twice(
    mock: str, driver: str, drop_after: int
) -> None:
    run = await run_stream(
        driver, GEMINI.url(mock), dialect="gemini",
        scenario=f"{SCENARIO}; sse_ids=1; drop_after={drop_after}", resume="sse",
    )
    assert run.error is None
    message = run.message
    assert (message.status, message.finish_reason) == (Status.COMPLETED, FinishReason.TOOL_CALLS)
    [call] = message.tool_calls
    assert (call.name, call.arguments) == ("get_weather", ARGUMENTS)
    assert message.duplicates == 0
    assert message.last_seq == FRAMES
    assert [r.last_event_id for r in run.requests] == [None, str(drop_after)]
    path = GEMINI.path.split("?")[0]
    assert mock_counts(mock) == {"generations": {path: 1}, "resumes": {path: 1}}


async def test_partial_args_is_refused_where_the_provider_has_no_such_stream(mock: str) -> None:
    anthropic = LAYOUTS["anthropic"]
    run = await run_stream("async", anthropic.url(mock), dialect="anthropic", scenario=SCENARIO)
    assert run.error is not None
    assert "partial_args" in str(run.error)
