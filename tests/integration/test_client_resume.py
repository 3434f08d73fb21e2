"""Drops after the first delta: a verified resume continues the same generation without one
duplicated character; without a resumable identity the stream ends ``interrupted`` with the exact
prefix kept and nothing generated twice. Both drivers, against the mock under real uvicorn."""

from __future__ import annotations

import pytest
from tests.integration.test_client_support import (
    DIALECTS,
    DRIVERS,
    LAYOUTS,
    SSE_DIALECTS,
    mock_counts,
    reset_mock,
    run_stream,
)

from unbroken.errors import Interrupted, TransportError
from unbroken.finish import FinishReason, Status
from unbroken.mock import reply_deltas, reply_text

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

T = 5  # tokens per reply: small, every frame kind still present
RESPONSES = LAYOUTS["openai-responses"]
BACKGROUND = {"model": "m", "stream": True, "background": True, "input": "hi"}


@pytest.fixture
def mock(mock_server_session: str) -> str:
    """The session's mock with fresh counters."""
    return reset_mock(mock_server_session)


# -- background Responses: resume="auto" knows the response id ----------------------------------

# Before any text (after response.created, after content_part.added), after the first text frame,
# mid text, after the last text frame, and after output_item.done (only response.completed left).
BACKGROUND_DROPS = [1, 4, 5, 7, RESPONSES.last_text(T), RESPONSES.total(T) - 1]


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("drop_after", BACKGROUND_DROPS)
async def test_background_responses_resume_after_a_drop(
    mock: str, driver: str, drop_after: int
) -> None:
    run = await run_stream(
        driver, RESPONSES.url(mock), dialect="openai-responses", body=BACKGROUND,
        scenario=f"tokens={T}; drop_after={drop_after}",
    )
    assert run.error is None
    message = run.message
    assert message.status is Status.COMPLETED
    assert message.finish_reason is FinishReason.STOP
    assert message.text == reply_text(0, T)
    assert run.shown == reply_text(0, T)  # the caller saw every character exactly once
    assert message.duplicates == 0
    assert message.last_seq == RESPONSES.seq_of(RESPONSES.total(T))
    assert run.connections == 2
    assert mock_counts(mock) == {
        "generations": {"/v1/responses": 1},
        "resumes": {"/v1/responses": 1},
    }
    # The resume asked for exactly the frames after the last one committed.
    resume = run.requests[1]
    assert resume.method == "GET"
    assert resume.url.endswith(f"?stream=true&starting_after={drop_after - 1}")
    assert [w.code for w in message.warnings].count("resumed") == 1


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("drop_after", [5, RESPONSES.last_text(T)])
async def test_background_resume_after_a_drop_inside_a_character(
    mock: str, driver: str, drop_after: int
) -> None:
    run = await run_stream(
        driver, RESPONSES.url(mock), dialect="openai-responses", body=BACKGROUND,
        scenario=f"tokens={T}; drop_after={drop_after}; drop_mid=1",
    )
    assert run.error is None
    assert run.message.status is Status.COMPLETED
    assert run.message.text == run.shown == reply_text(0, T)
    assert run.connections == 2
    assert mock_counts(mock) == {
        "generations": {"/v1/responses": 1},
        "resumes": {"/v1/responses": 1},
    }


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_duplicated_frame_is_counted_never_shown(mock: str, driver: str) -> None:
    # duplicate=6 repeats the second text frame on the wire; the drop then falls after it.
    run = await run_stream(
        driver, RESPONSES.url(mock), dialect="openai-responses", body=BACKGROUND,
        scenario=f"tokens={T}; duplicate=6; drop_after=8",
    )
    assert run.error is None
    assert run.message.text == run.shown == reply_text(0, T)
    assert run.message.duplicates == 1
    assert run.connections == 2
    # frames 1..8 on the wire are sequence numbers 0..6 (one repeated): resume after 6.
    assert run.requests[1].url.endswith("starting_after=6")


@pytest.mark.parametrize("driver", DRIVERS)
async def test_explicit_openai_background_resume(mock: str, driver: str) -> None:
    run = await run_stream(
        driver, RESPONSES.url(mock), dialect="openai-responses", body=BACKGROUND,
        scenario=f"tokens={T}; drop_after=6", resume="openai-background",
    )
    assert run.error is None
    assert run.message.text == reply_text(0, T)
    assert mock_counts(mock)["resumes"] == {"/v1/responses": 1}


@pytest.mark.parametrize("driver", DRIVERS)
async def test_resume_none_never_resumes_a_background_response(
    mock: str, driver: str
) -> None:
    run = await run_stream(
        driver, RESPONSES.url(mock), dialect="openai-responses", body=BACKGROUND,
        scenario=f"tokens={T}; drop_after=6", resume="none",
    )
    assert isinstance(run.error, Interrupted)
    assert run.error.message is run.message
    assert run.message.status is Status.INTERRUPTED
    assert run.message.text == run.shown == RESPONSES.text_after(6, T)
    assert run.connections == 1
    assert mock_counts(mock) == {"generations": {"/v1/responses": 1}, "resumes": {}}


# -- sse_ids: resume="sse" re-sends the request with Last-Event-ID ------------------------------


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", SSE_DIALECTS)
@pytest.mark.parametrize("where", ["first_text", "mid_text", "last_text"])
async def test_sse_ids_resume_with_last_event_id(
    mock: str, driver: str, dialect: str, where: str
) -> None:
    layout = LAYOUTS[dialect]
    drop_after = {
        "first_text": layout.first_text,
        "mid_text": layout.first_text + 2,
        "last_text": layout.last_text(T),
    }[where]
    run = await run_stream(
        driver, layout.url(mock), dialect=dialect,
        scenario=f"tokens={T}; sse_ids=1; drop_after={drop_after}", resume="sse",
    )
    assert run.error is None
    message = run.message
    assert message.status is Status.COMPLETED
    assert message.finish_reason is FinishReason.STOP
    assert message.text == run.shown == reply_text(0, T)
    assert message.duplicates == 0
    assert message.last_seq == layout.seq_of(layout.total(T))
    assert run.connections == 2
    assert [r.last_event_id for r in run.requests] == [None, str(drop_after)]
    assert mock_counts(mock) == {
        "generations": {layout.path.split("?")[0]: 1},
        "resumes": {layout.path.split("?")[0]: 1},
    }


@pytest.mark.parametrize("driver", DRIVERS)
async def test_sse_ids_without_resume_sse_are_not_trusted(mock: str, driver: str) -> None:
    # Numeric ids alone do not prove the server honours Last-Event-ID: "auto" does not resume.
    layout = LAYOUTS["anthropic"]
    run = await run_stream(
        driver, layout.url(mock), dialect="anthropic",
        scenario=f"tokens={T}; sse_ids=1; drop_after=5",
    )
    assert isinstance(run.error, Interrupted)
    assert run.message.text == layout.text_after(5, T)
    assert mock_counts(mock) == {"generations": {"/v1/messages": 1}, "resumes": {}}


# -- no resumable identity: interrupted, exact prefix, never generated twice --------------------


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("texts", [1, 3, T])
async def test_a_drop_after_the_first_delta_is_interrupted_with_the_exact_prefix(
    mock: str, driver: str, dialect: str, texts: int
) -> None:
    layout = LAYOUTS[dialect]
    drop_after = layout.first_text + texts - 1
    run = await run_stream(
        driver, layout.url(mock), dialect=dialect,
        scenario=f"tokens={T}; drop_after={drop_after}",
    )
    expected = "".join(reply_deltas(0, T)[:texts])
    assert expected == layout.text_after(drop_after, T)
    assert isinstance(run.error, Interrupted)
    assert isinstance(run.error.__cause__, TransportError)
    message = run.message
    assert run.error.message is message
    assert message.status is Status.INTERRUPTED
    assert message.finish_reason is None
    assert message.text == run.shown == expected
    assert message.last_seq == layout.seq_of(drop_after)
    assert isinstance(message.error, TransportError)
    assert run.connections == 1
    assert mock_counts(mock) == {
        "generations": {layout.path.split("?")[0]: 1},
        "resumes": {},
    }


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_drop_before_the_first_delta_is_retried_and_completes(
    mock: str, driver: str, dialect: str
) -> None:
    layout = LAYOUTS[dialect]
    # Only the first attempt drops (a flaky network), right before the first text frame.
    run = await run_stream(
        driver, layout.url(mock), dialect=dialect,
        scenario=[f"tokens={T}; drop_after={layout.first_text - 1}", f"tokens={T}"],
    )
    assert run.error is None
    assert run.message.status is Status.COMPLETED
    assert run.message.text == run.shown == reply_text(0, T)
    assert run.message.duplicates == 0
    assert run.connections == 2
    assert [r.last_event_id for r in run.requests] == [None, None]
    assert mock_counts(mock) == {
        "generations": {layout.path.split("?")[0]: 2},
        "resumes": {},
    }


@pytest.mark.parametrize("driver", DRIVERS)
async def test_drops_before_the_first_delta_exhaust_the_attempts(
    mock: str, driver: str
) -> None:
    layout = LAYOUTS["anthropic"]
    run = await run_stream(
        driver, layout.url(mock), dialect="anthropic", scenario=f"tokens={T}; drop_after=3",
    )
    assert isinstance(run.error, Interrupted)
    assert run.message.status is Status.INTERRUPTED
    assert run.message.text == run.shown == ""
    assert run.connections == 3
    assert mock_counts(mock) == {"generations": {"/v1/messages": 3}, "resumes": {}}


# -- drop_mid: the half frame and the half character never reach the text -----------------------


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_drop_mid_keeps_only_whole_frames(
    mock: str, driver: str, dialect: str
) -> None:
    layout = LAYOUTS[dialect]
    drop_after = layout.first_text + 1  # the cut falls inside the third text frame
    run = await run_stream(
        driver, layout.url(mock), dialect=dialect,
        scenario=f"tokens={T}; drop_after={drop_after}; drop_mid=1",
    )
    expected = "".join(reply_deltas(0, T)[:2])
    assert isinstance(run.error, Interrupted)
    message = run.message
    assert message.status is Status.INTERRUPTED
    assert message.text == run.shown == expected
    assert "\ufffd" not in message.text
    assert message.last_seq == layout.seq_of(drop_after)
    codes = [w.code for w in message.warnings]
    assert "unterminated_tail" in codes
    assert "truncated_utf8" in codes
    assert run.connections == 1
    assert mock_counts(mock)["generations"] == {layout.path.split("?")[0]: 1}
