"""How a client stream ends: every finish reason, tool calls, faults in the bytes, refused or
mistyped answers, a caller who stops early, ``raise_on_error=False``, and a caller that imports
nothing but ``unbroken``. Both drivers, against the mock under real uvicorn."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import httpx2
import pytest
from tests.integration.test_client_support import (
    DIALECTS,
    DRIVERS,
    LAYOUTS,
    SSL_CONTEXT,
    mock_counts,
    raw_body,
    reset_mock,
    run_stream,
)

from unbroken.client import astream, stream
from unbroken.errors import (
    ContentTypeError,
    DecodingError,
    Interrupted,
    PayloadError,
    ProviderError,
    TransportError,
    UpstreamStatusError,
)
from unbroken.events import TextDelta, ToolCallDelta
from unbroken.finish import FinishReason, Status
from unbroken.mock import reply_deltas, reply_text
from unbroken.mock.reply import TOOL_ARGUMENTS, TOOL_NAME

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

T = 4

# The provider's own word for each finish the mock can send (its docstring's layout).
RAW_FINISH = {
    "openai-chat": {"stop": "stop", "length": "length", "content_filter": "content_filter",
                    "tool_calls": "tool_calls"},
    "openai-responses": {"stop": "completed", "length": "max_output_tokens",
                         "content_filter": "content_filter", "tool_calls": "completed"},
    "anthropic": {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal",
                  "tool_calls": "tool_use"},
    "gemini": {"stop": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY",
               "tool_calls": "STOP"},
    "ollama": {"stop": "stop", "length": "length", "tool_calls": "stop"},
}
ENDS = {
    "stop": (Status.COMPLETED, FinishReason.STOP),
    "length": (Status.TRUNCATED, FinishReason.LENGTH),
    "content_filter": (Status.FILTERED, FinishReason.CONTENT_FILTER),
    "tool_calls": (Status.COMPLETED, FinishReason.TOOL_CALLS),
}
FINISH_CASES = [(d, f) for d in DIALECTS for f in ENDS if f in RAW_FINISH[d]]
TOOL_VALUE = {"city": "東京 🌧", "unit": "celsius"}


@pytest.fixture
def mock(mock_server_session: str) -> str:
    return reset_mock(mock_server_session)


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize(("dialect", "finish"), FINISH_CASES)
async def test_every_finish_ends_iteration_normally(
    mock: str, driver: str, dialect: str, finish: str
) -> None:
    run = await run_stream(
        driver, LAYOUTS[dialect].url(mock), dialect=dialect, scenario=f"tokens={T}; finish={finish}"
    )
    status, reason = ENDS[finish]
    assert run.error is None
    message = run.message
    assert message.status is status
    assert message.finish_reason is reason
    assert message.raw_finish_reason == RAW_FINISH[dialect][finish]
    assert message.text == run.shown == reply_text(0, T)
    assert message.closed
    assert run.connections == 1


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_tool_call_is_assembled_with_its_exact_arguments(
    mock: str, driver: str, dialect: str
) -> None:
    run = await run_stream(
        driver, LAYOUTS[dialect].url(mock), dialect=dialect,
        scenario=f"tokens={T}; finish=tool_calls",
    )
    assert run.error is None
    [call] = run.message.tool_calls
    assert call.name == TOOL_NAME
    assert call.value == TOOL_VALUE
    if dialect in ("gemini", "ollama"):
        # These send the arguments as one JSON object, not as text: the client serializes it.
        assert call.arguments == json.dumps(TOOL_VALUE, ensure_ascii=False, separators=(",", ":"))
        assert call.id is None
    else:
        # Streamed as text in two deltas: kept byte for byte.
        assert call.arguments == TOOL_ARGUMENTS
        assert call.id is not None
        assert call.id.startswith("toolu_" if dialect == "anthropic" else "call_")
    streamed = "".join(e.arguments for e in run.events if isinstance(e, ToolCallDelta))
    assert streamed == call.arguments


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_split_utf8_gives_the_exact_text(mock: str, driver: str, dialect: str) -> None:
    run = await run_stream(
        driver, LAYOUTS[dialect].url(mock), dialect=dialect, scenario="tokens=8; split_utf8=1"
    )
    assert run.error is None
    assert run.message.status is Status.COMPLETED
    assert run.message.text == run.shown == reply_text(0, 8)
    # Each delta arrived whole, as the provider cut it.
    assert [e.text for e in run.events if isinstance(e, TextDelta)] == reply_deltas(0, 8)


# -- faults in the bytes: failed, the prefix before the bad frame kept ---------------------------


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_malformed_json_fails_with_a_payload_error(
    mock: str, driver: str, dialect: str
) -> None:
    layout = LAYOUTS[dialect]
    bad = layout.first_text + 1
    scenario = f"tokens={T}; malformed_json_at={bad}"
    run = await run_stream(driver, layout.url(mock), dialect=dialect, scenario=scenario)
    assert isinstance(run.error, PayloadError)
    assert run.error.line == bad  # the frame number (the line, for NDJSON)
    # Where the bad frame starts: the bytes of the frames before it (Gemini's end in CRLF CRLF).
    separator = {"ollama": b"\n", "gemini": b"\r\n\r\n"}.get(dialect, b"\n\n")
    frames = raw_body(mock, dialect, scenario).split(separator)
    assert run.error.offset == sum(len(f) + len(separator) for f in frames[: bad - 1])
    assert run.error.message is run.message
    assert run.message.status is Status.FAILED
    assert run.message.error is run.error
    assert run.message.text == run.shown == reply_deltas(0, T)[0]
    assert run.connections == 1  # a protocol error is not retried


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_invalid_utf8_fails_with_its_byte_offset(
    mock: str, driver: str, dialect: str
) -> None:
    layout = LAYOUTS[dialect]
    scenario = f"tokens={T}; invalid_utf8_at={layout.first_text + 1}"
    run = await run_stream(driver, layout.url(mock), dialect=dialect, scenario=scenario)
    assert isinstance(run.error, DecodingError)
    assert run.error.offset == raw_body(mock, dialect, scenario).index(b"\xff")
    assert run.message.status is Status.FAILED
    assert run.message.text == run.shown == reply_deltas(0, T)[0]
    assert "invalid_utf8" in [w.code for w in run.message.warnings]
    assert run.connections == 1


# -- refused and mistyped answers ---------------------------------------------------------------


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_final_400_raises_upstream_status_error(
    mock: str, driver: str, dialect: str
) -> None:
    run = await run_stream(driver, LAYOUTS[dialect].url(mock), dialect=dialect, scenario="tokens=0")
    # Interrupted, and of the cause's type (Interrupted[UpstreamStatusError]).
    assert isinstance(run.error, Interrupted)
    assert isinstance(run.error, UpstreamStatusError)
    assert run.error.status == 400
    assert not run.error.retryable
    assert "bad scenario key 'tokens'" in run.error.body
    assert run.error.message is run.message
    assert run.message.error is run.error.__cause__
    assert type(run.message.error) is UpstreamStatusError
    assert run.message.text == ""
    assert run.message.closed
    assert run.message.status is Status.INTERRUPTED
    assert run.connections == 1
    assert mock_counts(mock) == {"generations": {}, "resumes": {}}


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic", "openai-responses"])
async def test_a_json_answer_to_an_sse_dialect_is_a_content_type_error(
    mock: str, driver: str, dialect: str
) -> None:
    body = {"model": "m", "stream": False, "input": "hi", "max_tokens": 8}
    run = await run_stream(driver, LAYOUTS[dialect].url(mock), dialect=dialect, body=body)
    assert isinstance(run.error, ContentTypeError)
    assert run.error.content_type == "application/json"
    assert run.error.expected == "text/event-stream"
    assert run.message.text == ""
    assert run.connections == 1  # not retried: asking again gives the same answer


@pytest.mark.parametrize("driver", DRIVERS)
async def test_an_sse_answer_to_ollama_is_a_content_type_error(mock: str, driver: str) -> None:
    run = await run_stream(
        driver, LAYOUTS["openai-chat"].url(mock), dialect="ollama", body={"stream": True}
    )
    assert isinstance(run.error, ContentTypeError)
    assert run.error.content_type == "text/event-stream"
    assert run.error.expected == "application/x-ndjson or application/json"
    assert run.connections == 1


# -- the caller stops early, or asks for no exceptions -------------------------------------------


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_leaving_the_block_early_cancels(mock: str, driver: str, dialect: str) -> None:
    run = await run_stream(
        driver, LAYOUTS[dialect].url(mock), dialect=dialect, scenario="tokens=30; delay_ms=2",
        stop_after=2,
    )
    assert run.error is None
    assert run.message.status is Status.CANCELLED
    assert run.message.finish_reason is None
    assert run.message.closed
    assert run.message.text == run.shown == "".join(reply_deltas(0, 30)[:2])
    assert run.connections == 1


URL_PATH = LAYOUTS["openai-chat"].path
CLEAN = {"Unbroken-Mock": "tokens=40; delay_ms=5"}
BODY = {"stream": True}


def pool_of_one() -> httpx2.Limits:
    return httpx2.Limits(max_connections=1, max_keepalive_connections=1)


def test_leaving_the_block_early_releases_the_connection_sync(mock: str) -> None:
    # One connection in the pool: if the cut stream still held it, the next request could not
    # get one within the pool timeout.
    with httpx2.Client(verify=SSL_CONTEXT, limits=pool_of_one()) as client:
        with stream("POST", mock + URL_PATH, dialect="openai-chat", json=BODY, headers=CLEAN,
                    client=client) as s:
            for _text in s.iter_text():
                break
        assert s.message.status is Status.CANCELLED
        assert s.message.text == reply_deltas(0, 40)[0]
        response = client.get(mock + "/_mock/requests", timeout=httpx2.Timeout(5, pool=1))
        assert response.json()["generations"] == {URL_PATH: 1}


async def test_leaving_the_block_early_releases_the_connection_async(mock: str) -> None:
    async with httpx2.AsyncClient(verify=SSL_CONTEXT, limits=pool_of_one()) as client:
        async with astream("POST", mock + URL_PATH, dialect="openai-chat", json=BODY,
                           headers=CLEAN, client=client) as s:
            async for _text in s.iter_text():
                break
        assert s.message.status is Status.CANCELLED
        assert s.message.text == reply_deltas(0, 40)[0]
        response = await client.get(mock + "/_mock/requests", timeout=httpx2.Timeout(5, pool=1))
        assert response.json()["generations"] == {URL_PATH: 1}


def test_iter_text_yields_exactly_the_text_deltas(mock: str) -> None:
    with stream("POST", mock + URL_PATH, dialect="openai-chat", json=BODY,
                headers={"Unbroken-Mock": "tokens=6"}) as s:
        texts = list(s.iter_text())
    assert texts == reply_deltas(0, 6)
    assert s.message.status is Status.COMPLETED


async def test_async_iter_text_yields_exactly_the_text_deltas(mock: str) -> None:
    async with astream("POST", mock + URL_PATH, dialect="openai-chat", json=BODY,
                       headers={"Unbroken-Mock": "tokens=6"}) as s:
        texts = [text async for text in s.iter_text()]
    assert texts == reply_deltas(0, 6)
    assert s.message.status is Status.COMPLETED


@pytest.mark.parametrize("driver", DRIVERS)
async def test_raise_on_error_false_sets_the_message_instead(mock: str, driver: str) -> None:
    layout = LAYOUTS["anthropic"]
    dropped = await run_stream(
        driver, layout.url(mock), dialect="anthropic", raise_on_error=False,
        scenario=f"tokens={T}; drop_after=5",
    )
    assert dropped.error is None
    assert dropped.message.status is Status.INTERRUPTED
    assert isinstance(dropped.message.error, TransportError)
    assert dropped.message.text == layout.text_after(5, T)
    failed = await run_stream(
        driver, layout.url(mock), dialect="anthropic", raise_on_error=False,
        scenario=f"tokens={T}; error_at=5",
    )
    assert failed.error is None
    assert failed.message.status is Status.FAILED
    assert isinstance(failed.message.error, ProviderError)
    assert failed.message.text == layout.text_after(4, T)


# -- nothing but unbroken in the caller ---------------------------------------------------------

CALLER = textwrap.dedent(
    """
    import sys

    import unbroken

    url = sys.argv[1]
    retry = unbroken.Retry(backoff=0.01)
    with unbroken.stream("POST", url, dialect="openai-chat", json={"stream": True},
                         headers={"Unbroken-Mock": "tokens=3"}, retry=retry) as s:
        text = "".join(s.iter_text())
    print("completed", s.message.status, len(text))
    try:
        with unbroken.stream("POST", url, dialect="openai-chat", json={"stream": True},
                             headers={"Unbroken-Mock": "tokens=3; drop_after=3"},
                             retry=retry) as s:
            for _event in s:
                pass
    except unbroken.Interrupted as err:
        print("interrupted", type(err.__cause__).__name__, len(err.message.text))
    try:
        with unbroken.stream("POST", "http://127.0.0.1:9/", dialect="openai-chat",
                             retry=unbroken.Retry(attempts=1, budget=None)) as s:
            for _event in s:
                pass
    except unbroken.StreamError as err:
        print("refused", type(err).__name__, type(err.__cause__).__name__)
    sdks = ("openai", "anthropic", "google", "ollama", "httpx", "httpx_sse", "sseclient")
    print("sdks", sorted(name for name in sdks if name in sys.modules))
    """
)


def test_a_caller_needs_nothing_but_unbroken(mock: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CALLER, mock + URL_PATH],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"completed completed {len(reply_text(0, 3))}",
        f"interrupted TransportError {len(reply_deltas(0, 3)[0] + reply_deltas(0, 3)[1])}",
        "refused Interrupted TransportError",
        "sdks []",
    ]
