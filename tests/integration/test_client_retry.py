"""Retries before the first delta (status faults, error events, stalls) and the deadlines, with
both drivers against the mock under real uvicorn. Delays are read from the session's decisions,
never from a clock; pytest-timeout is the only (generous) bound on how long a deadline takes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.integration.test_client_support import (
    DIALECTS,
    DRIVERS,
    LAYOUTS,
    mock_counts,
    reset_mock,
    run_stream,
)

from unbroken.client import Retry
from unbroken.client.session import StreamSession
from unbroken.errors import (
    FirstEventTimeout,
    IdleTimeout,
    Interrupted,
    ProviderError,
    StreamError,
    TotalTimeout,
    UpstreamStatusError,
)
from unbroken.finish import FinishReason, Status
from unbroken.mock import reply_deltas, reply_text

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

T = 4


@pytest.fixture
def mock(mock_server_session: str) -> str:
    return reset_mock(mock_server_session)


@pytest.fixture
def delays(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float | None]]:
    """Every decision ``on_failure`` takes: the delay before the next attempt, or None (stop)."""
    decided: list[float | None] = []
    original = StreamSession.on_failure

    def spy(self: StreamSession, error: StreamError, now: float) -> float | None:
        delay = original(self, error, now)
        decided.append(delay)
        return delay

    monkeypatch.setattr(StreamSession, "on_failure", spy)
    yield decided


def generation_path(dialect: str) -> str:
    return LAYOUTS[dialect].path.split("?")[0]


# -- status faults ------------------------------------------------------------------------------


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_429_is_retried_after_the_servers_delay_then_completes(
    mock: str, driver: str, dialect: str, delays: list[float | None]
) -> None:
    # The mock sends Retry-After: 1 and retry-after-ms: 50; the precise one wins.
    run = await run_stream(
        driver, LAYOUTS[dialect].url(mock), dialect=dialect,
        scenario=f"tokens={T}; status=429; status_times=2; retry_after=0.05",
    )
    assert run.error is None
    assert run.message.status is Status.COMPLETED
    assert run.message.text == run.shown == reply_text(0, T)
    assert run.connections == 3
    assert delays == [0.05, 0.05]
    # Refused requests generate nothing.
    assert mock_counts(mock) == {"generations": {generation_path(dialect): 1}, "resumes": {}}


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic", "ollama"])
async def test_503_is_retried_with_backoff_then_completes(
    mock: str, driver: str, dialect: str, delays: list[float | None]
) -> None:
    run = await run_stream(
        driver, LAYOUTS[dialect].url(mock), dialect=dialect,
        scenario=f"tokens={T}; status=503; status_times=2",
        retry=Retry(attempts=3, backoff=0.01, max_backoff=1.0),
    )
    assert run.error is None
    assert run.message.status is Status.COMPLETED
    assert run.message.text == reply_text(0, T)
    assert run.connections == 3
    # No Retry-After: backoff * 2**(n-1), jittered on its upper half.
    first, second = delays
    assert first is not None and 0.005 <= first <= 0.01
    assert second is not None and 0.01 <= second <= 0.02


@pytest.mark.parametrize("driver", DRIVERS)
async def test_503_every_time_exhausts_the_attempts(mock: str, driver: str) -> None:
    run = await run_stream(
        driver, LAYOUTS["openai-chat"].url(mock), dialect="openai-chat",
        scenario=f"tokens={T}; status=503",
    )
    assert isinstance(run.error, UpstreamStatusError)
    assert run.error.status == 503
    assert run.error.retryable
    assert "mock status 503" in run.error.body
    assert run.error.message is run.message
    assert run.message.text == ""
    assert run.connections == 3
    assert mock_counts(mock) == {"generations": {}, "resumes": {}}


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_retry_after_too_long_to_wait_for_is_not_waited_for(
    mock: str, driver: str, delays: list[float | None]
) -> None:
    run = await run_stream(
        driver, LAYOUTS["anthropic"].url(mock), dialect="anthropic",
        scenario=f"tokens={T}; status=429; retry_after=120",
    )
    assert isinstance(run.error, UpstreamStatusError)
    assert run.error.status == 429
    assert run.error.retry_after == 120.0
    assert '"rate_limit_error"' in run.error.body
    assert run.connections == 1
    assert delays == [None]


@pytest.mark.parametrize("driver", DRIVERS)
async def test_one_attempt_means_no_retry(mock: str, driver: str) -> None:
    run = await run_stream(
        driver, LAYOUTS["gemini"].url(mock), dialect="gemini",
        scenario=f"tokens={T}; status=500; status_times=1", retry=Retry(attempts=1, budget=None),
    )
    assert isinstance(run.error, UpstreamStatusError)
    assert run.error.status == 500
    assert run.connections == 1


# -- error events -------------------------------------------------------------------------------

# (error type, retryable) per dialect, as design.md's table says for the mock's error frame:
# OpenAI server_error, Anthropic overloaded_error, Gemini code 500 are retryable; Ollama's bare
# {"error": "..."} says nothing about its cause.
ERRORS = {
    "openai-chat": ("server_error", True),
    "openai-responses": ("server_error", True),
    "anthropic": ("overloaded_error", True),
    "gemini": ("INTERNAL", True),
    "ollama": ("error", False),
}


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_an_error_event_after_the_first_delta_fails_the_stream(
    mock: str, driver: str, dialect: str
) -> None:
    layout = LAYOUTS[dialect]
    run = await run_stream(
        driver, layout.url(mock), dialect=dialect,
        scenario=f"tokens={T}; error_at={layout.first_text + 1}",
    )
    error_type, retryable = ERRORS[dialect]
    assert isinstance(run.error, ProviderError)
    assert run.error.event.type == error_type
    assert run.error.retryable is retryable
    assert run.error.message is run.message
    assert run.message.status is Status.FAILED
    assert run.message.error is run.error
    assert run.message.text == run.shown == reply_deltas(0, T)[0]
    assert run.connections == 1  # text was shown: a fresh attempt would repeat it
    assert mock_counts(mock) == {"generations": {generation_path(dialect): 1}, "resumes": {}}


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_an_error_event_before_the_first_delta_is_retried_when_retryable(
    mock: str, driver: str, dialect: str
) -> None:
    layout = LAYOUTS[dialect]
    run = await run_stream(
        driver, layout.url(mock), dialect=dialect,
        scenario=[f"tokens={T}; error_at={layout.first_text}", f"tokens={T}"],
    )
    _error_type, retryable = ERRORS[dialect]
    if retryable:
        assert run.error is None
        assert run.message.status is Status.COMPLETED
        assert run.message.text == run.shown == reply_text(0, T)
        assert run.connections == 2
        expected = 2
    else:
        assert isinstance(run.error, ProviderError)
        assert run.message.status is Status.FAILED
        assert run.message.text == ""
        assert run.connections == 1
        expected = 1
    assert mock_counts(mock) == {
        "generations": {generation_path(dialect): expected},
        "resumes": {},
    }


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_retryable_error_every_time_exhausts_the_attempts(mock: str, driver: str) -> None:
    run = await run_stream(
        driver, LAYOUTS["anthropic"].url(mock), dialect="anthropic",
        scenario=f"tokens={T}; error_at=4",
    )
    assert isinstance(run.error, ProviderError)
    assert run.error.event.type == "overloaded_error"
    assert run.message.status is Status.FAILED
    assert run.connections == 3
    assert mock_counts(mock)["generations"] == {"/v1/messages": 3}


# -- deadlines ----------------------------------------------------------------------------------


@pytest.mark.timeout(15)
@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize(("dialect", "idle"), [
    ("openai-chat", 1.5),  # keep-alive comments
    ("anthropic", 0.5),  # ping events: frames, but not content
    ("ollama", 0.5),  # nothing at all on the wire
])
async def test_pings_do_not_hold_off_the_idle_timeout(
    mock: str, driver: str, dialect: str, idle: float
) -> None:
    layout = LAYOUTS[dialect]
    run = await run_stream(
        driver, layout.url(mock), dialect=dialect,
        scenario="tokens=10; pings=1; stall_after=5; stall_s=30", idle_timeout=idle,
    )
    assert isinstance(run.error, Interrupted)
    assert isinstance(run.error, IdleTimeout)
    assert run.error.seconds == idle
    assert run.error.message is run.message
    assert run.message.status is Status.INTERRUPTED
    assert run.message.error is run.error.__cause__
    assert type(run.message.error) is IdleTimeout
    assert run.message.text == run.shown == layout.text_after(5, 10)
    assert run.connections == 1  # content was shown and there is no identity to resume
    assert mock_counts(mock) == {"generations": {generation_path(dialect): 1}, "resumes": {}}


@pytest.mark.timeout(15)
@pytest.mark.parametrize("driver", DRIVERS)
async def test_an_idle_timeout_is_resumed_when_the_stream_can_be(mock: str, driver: str) -> None:
    layout = LAYOUTS["openai-chat"]
    run = await run_stream(
        driver, layout.url(mock), dialect="openai-chat", resume="sse",
        # Deadlines here are short of the 30 s stall, long past a loaded machine's pauses.
        scenario="tokens=6; sse_ids=1; pings=1; stall_after=4; stall_s=30", idle_timeout=1.5,
    )
    assert run.error is None
    assert run.message.status is Status.COMPLETED
    assert run.message.text == run.shown == reply_text(0, 6)
    assert [r.last_event_id for r in run.requests] == [None, "4"]
    assert [w.code for w in run.message.warnings].count("resumed") == 1
    assert mock_counts(mock) == {
        "generations": {"/v1/chat/completions": 1},
        "resumes": {"/v1/chat/completions": 1},
    }


@pytest.mark.timeout(15)
@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("scenario", [
    "tokens=4; pings=1; stall_after=1; stall_s=30",  # role chunk, then keep-alives only
    "tokens=4; stall_after=0; stall_s=30",  # headers, then not one byte
])
async def test_no_first_event_in_time_is_retried_then_raised(
    mock: str, driver: str, scenario: str
) -> None:
    # Nothing was shown, so a stalled attempt is retried (design.md: before the first content
    # delta a retryable failure is retried); the deadline is raised when attempts run out.
    run = await run_stream(
        driver, LAYOUTS["openai-chat"].url(mock), dialect="openai-chat", scenario=scenario,
        first_event_timeout=0.5, retry=Retry(attempts=2, backoff=0.01, budget=None),
    )
    assert isinstance(run.error, FirstEventTimeout)
    assert run.error.seconds == 0.5
    assert run.message.status is Status.INTERRUPTED
    assert run.message.text == ""
    assert run.connections == 2
    assert mock_counts(mock)["generations"] == {"/v1/chat/completions": 2}


@pytest.mark.timeout(15)
@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_stalled_first_attempt_is_retried_and_completes(mock: str, driver: str) -> None:
    run = await run_stream(
        driver, LAYOUTS["gemini"].url(mock), dialect="gemini",
        scenario=["tokens=4; stall_after=0; stall_s=30", "tokens=4"], first_event_timeout=2,
    )
    assert run.error is None
    assert run.message.status is Status.COMPLETED
    assert run.message.finish_reason is FinishReason.STOP
    assert run.message.text == run.shown == reply_text(0, 4)
    assert run.connections == 2


@pytest.mark.timeout(15)
@pytest.mark.parametrize("driver", DRIVERS)
async def test_the_total_timeout_is_not_retried(mock: str, driver: str) -> None:
    layout = LAYOUTS["anthropic"]
    run = await run_stream(
        driver, layout.url(mock), dialect="anthropic",
        scenario="tokens=6; pings=1; stall_after=5; stall_s=30", total_timeout=2,
    )
    assert isinstance(run.error, TotalTimeout)
    assert run.error.seconds == 2
    assert run.message.status is Status.INTERRUPTED
    assert run.message.text == layout.text_after(5, 6)
    assert run.connections == 1


@pytest.mark.timeout(15)
@pytest.mark.parametrize("driver", DRIVERS)
async def test_raise_on_error_false_keeps_the_timeout_on_the_message(
    mock: str, driver: str
) -> None:
    layout = LAYOUTS["openai-chat"]
    run = await run_stream(
        driver, layout.url(mock), dialect="openai-chat", raise_on_error=False,
        scenario="tokens=6; stall_after=3; stall_s=30", idle_timeout=1.5,
    )
    assert run.error is None
    assert run.message.status is Status.INTERRUPTED
    assert isinstance(run.message.error, IdleTimeout)
    assert run.message.text == layout.text_after(3, 6)


@pytest.mark.parametrize("driver", DRIVERS)
async def test_an_interrupted_stream_raises_interrupted_with_the_partial_message(
    mock: str, driver: str
) -> None:
    layout = LAYOUTS["gemini"]
    run = await run_stream(
        driver, layout.url(mock), dialect="gemini", scenario="tokens=4; drop_after=4",
    )
    # All text arrived, the finish chunk did not: the last delta is not completion.
    assert isinstance(run.error, Interrupted)
    assert run.error.message is run.message
    assert run.message.text == reply_text(0, 4)
    assert run.message.status is Status.INTERRUPTED


@pytest.mark.timeout(15)
@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_slow_caller_is_not_an_idle_server(mock: str, driver: str) -> None:
    # The caller takes longer over each event than idle_timeout; the server never stalls.
    layout = LAYOUTS["openai-chat"]
    run = await run_stream(
        driver, layout.url(mock), dialect="openai-chat", scenario="tokens=3; delay_ms=50",
        # The first event is not the subject: its deadline only has to outlast a cold start.
        idle_timeout=0.6, first_event_timeout=5, caller_pause=0.8,
    )
    assert run.error is None
    assert run.message.status is Status.COMPLETED
    assert run.message.text == run.shown == reply_text(0, 3)
    assert run.connections == 1
