"""OpenTelemetry spans and metrics of ``unbroken.stream`` / ``astream``, against the mock under
real uvicorn, for every dialect and every end state.

One stream is one CLIENT span ``{operation} {model}`` with the GenAI conventions' attributes and
unbroken's own under ``unbroken.``, and one point in each metric. Time to first chunk is the
receive time of the first output frame, as the message's trace records it: never the time of a
lifecycle frame before it.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from opentelemetry.trace import SpanKind, StatusCode
from tests.otel_support import recording

import unbroken
from unbroken._receiver import OUTPUT_EVENTS
from unbroken.message import Message

pytestmark = pytest.mark.integration

T = 3
_MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]


# Per dialect: the streaming path and body, the span name, the conventions' provider and
# operation, the frame number of the first text (a cut just after it is after visible output).
CALLS: dict[str, tuple[str, dict[str, Any], str, str, str, int]] = {
    "openai-chat": ("/v1/chat/completions",
                    {"model": "m", "stream": True, "messages": _MESSAGES,
                     "stream_options": {"include_usage": True}},
                    "chat m", "openai", "chat", 2),
    "openai-responses": ("/v1/responses", {"model": "m", "stream": True, "input": "hi"},
                         "chat m", "openai", "chat", 5),
    "anthropic": ("/v1/messages",
                  {"model": "m", "stream": True, "max_tokens": 100, "messages": _MESSAGES},
                  "chat m", "anthropic", "chat", 4),
    "gemini": ("/v1beta/models/gemini-m:streamGenerateContent?alt=sse",
               {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
               "generate_content gemini-m", "gcp.gemini", "generate_content", 1),
    "ollama": ("/api/chat", {"model": "m", "messages": _MESSAGES}, "chat m", "ollama", "chat", 1),
    "bedrock-converse": ("/model/us.anthropic.claude-x%3A0/converse-stream",
                         {"messages": [{"role": "user", "content": [{"text": "hi"}]}]},
                         "chat us.anthropic.claude-x:0", "aws.bedrock", "chat", 2),
}
# The provider's own word for each end the mock sends (the providers' documented values).
RAW = {
    "openai-chat": {"stop": "stop", "length": "length", "content_filter": "content_filter",
                    "error": "server_error"},
    "openai-responses": {"stop": "completed", "length": "max_output_tokens",
                         "content_filter": "content_filter", "error": "server_error"},
    "anthropic": {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal",
                  "error": "overloaded_error"},
    "gemini": {"stop": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY",
               "error": "MALFORMED_FUNCTION_CALL"},
    "ollama": {"stop": "stop", "length": "length", "error": "error"},
    "bedrock-converse": {"stop": "end_turn", "length": "max_tokens",
                         "content_filter": "content_filtered",
                         "error": "modelStreamErrorException"},
}
# end state -> (the mock's finish, unbroken's normalized finish reason)
STATES = {
    "completed": ("stop", "stop"),
    "truncated": ("length", "length"),
    "filtered": ("content_filter", "content_filter"),
    "failed": ("error", "error"),
    "interrupted": (None, None),  # the body is cut after the first text
    "cancelled": (None, None),  # the caller leaves after the first text
}
CASES = [(dialect, state) for dialect in CALLS for state in STATES
         if STATES[state][0] is None or STATES[state][0] in RAW[dialect]]
DYNAMIC = ("gen_ai.response.id", "gen_ai.response.time_to_first_chunk", "server.port")


def scenario(dialect: str, state: str) -> str:
    finish = STATES[state][0]
    if finish is not None:
        return f"tokens={T}; finish={finish}"
    if state == "interrupted":
        return f"tokens={T}; drop_after={CALLS[dialect][5] + 1}"
    return f"tokens={T}"


def run(base: str, dialect: str, state: str) -> tuple[Message, int]:
    """One stream of ``state``; the message and the connections it took."""
    path, body, *_ = CALLS[dialect]
    with unbroken.stream("POST", base + path, dialect=dialect, json=body,
                         headers={"Unbroken-Mock": scenario(dialect, state)},
                         raise_on_error=False, resume="none") as s:
        for event in s:
            if state == "cancelled" and event.__class__ in OUTPUT_EVENTS:
                break
    return s.message, s.connections


def output_times(message: Message) -> list[float]:
    """Receive times (seconds since the stream started) of the committed output frames."""
    return [frame.t for frame in message.trace.frames
            if frame.outcome == "committed" and any(e.__class__ in OUTPUT_EVENTS
                                                    for e in frame.events)]


def expected_attributes(dialect: str, state: str, message: Message) -> dict[str, Any]:
    _path, _body, _name, provider, operation, _first = CALLS[dialect]
    model = CALLS[dialect][2].split(" ", 1)[1]
    finish, reason = STATES[state]
    out: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "server.address": "127.0.0.1",
        "unbroken.component": "client",
        "unbroken.dialect": dialect,
        "unbroken.status": state,
        "unbroken.frames": len(message.trace.frames),
        "unbroken.resumes": 0,
        "unbroken.retries": 0,
        "unbroken.duplicates": 0,
        "unbroken.gaps": 0,
        "unbroken.stalls": 0,
    }
    if dialect != "bedrock-converse":  # Converse streams never name the model
        out["gen_ai.response.model"] = model
    if finish is not None:
        out["gen_ai.response.finish_reasons"] = (RAW[dialect][finish],)
        out["unbroken.finish_reason"] = reason
    if state == "failed":
        out["error.type"] = RAW[dialect]["error"]
    if state == "interrupted":
        out["error.type"] = "TransportError"
    usage = message.usage
    if usage is not None:
        out["gen_ai.usage.input_tokens"] = usage.input_tokens
        out["gen_ai.usage.output_tokens"] = usage.output_tokens
    return out


@pytest.mark.parametrize(("dialect", "state"), CASES)
def test_one_span_and_one_point_per_metric_for_every_dialect_and_end_state(
    mock_server: str, dialect: str, state: str
) -> None:
    with recording() as recorded:
        message, connections = run(mock_server, dialect, state)
    assert message.status.value == state
    assert connections == 1
    [span] = recorded.spans()
    assert span.name == CALLS[dialect][2]
    assert span.kind is SpanKind.CLIENT
    attributes = dict(span.attributes or {})
    assert {k: v for k, v in attributes.items() if k not in DYNAMIC} \
        == expected_attributes(dialect, state, message)
    assert attributes.get("gen_ai.response.id") == message.id
    assert attributes["server.port"] == urlsplit(mock_server).port
    assert span.events == ()
    failed = state in ("failed", "interrupted")
    assert span.status.status_code is (StatusCode.ERROR if failed else StatusCode.UNSET)
    assert "gen_ai.output.messages" not in attributes  # content is opt-in

    # Metrics: one operation, its first chunk at the first output frame, its mean interval
    # between output frames, and the usage the message holds (never counted twice).
    times = output_times(message)
    assert times, "every case here shows output before its end"
    [duration] = recorded.points("gen_ai.client.operation.duration")
    [first] = recorded.points("gen_ai.client.operation.time_to_first_chunk")
    assert (duration.count, first.count) == (1, 1)
    assert first.sum == times[0] == attributes["gen_ai.response.time_to_first_chunk"]
    assert first.sum <= duration.sum
    per_chunk = recorded.points("gen_ai.client.operation.time_per_output_chunk")
    if len(times) > 1:
        [mean] = per_chunk
        assert mean.count == 1
        assert mean.sum == pytest.approx((times[-1] - times[0]) / (len(times) - 1))
    else:
        assert per_chunk == []
    metric_attributes = {k: v for k, v in attributes.items()
                         if k.startswith(("gen_ai.operation", "gen_ai.provider",
                                          "gen_ai.request.model", "gen_ai.response.model",
                                          "server.", "error.type"))}
    assert dict(duration.attributes or {}) == metric_attributes
    tokens = {dict(p.attributes or {})["gen_ai.token.type"]: (p.count, p.sum)
              for p in recorded.points("gen_ai.client.token.usage")}
    usage = message.usage
    expected_tokens = {} if usage is None else {
        kind: (1, value) for kind, value in (("input", usage.input_tokens),
                                              ("output", usage.output_tokens))
        if value is not None}
    assert tokens == expected_tokens


def test_a_lifecycle_frame_is_never_the_first_chunk(mock_server: str) -> None:
    """message_start, content_block_start and ping arrive at once, the first text 0.2 s later:
    the first chunk is the text's frame, recorded after every lifecycle frame."""
    path, body, *_ = CALLS["anthropic"]
    with recording() as recorded, unbroken.stream(
        "POST", mock_server + path, dialect="anthropic", json=body,
        headers={"Unbroken-Mock": f"tokens={T}; stall_after=3; stall_s=0.2"},
    ) as s:
        assert "".join(s.iter_text())
    frames = s.message.trace.frames
    lifecycle = [f.t for f in frames[:3]]
    assert [f.kinds for f in frames[:3]] == [("MessageStart", "Usage"), ("UnknownEvent",),
                                            ("Ping",)]
    assert frames[3].kinds == ("TextDelta",)
    [first] = recorded.points("gen_ai.client.operation.time_to_first_chunk")
    assert first.sum == frames[3].t
    assert all(t < first.sum for t in lifecycle)


def test_no_output_means_no_first_chunk(mock_server: str) -> None:
    """A stream cut after its role chunk (a lifecycle frame) has a duration, no first chunk."""
    path, body, *_ = CALLS["openai-chat"]
    with recording() as recorded, unbroken.stream(
        "POST", mock_server + path, dialect="openai-chat", json=body, resume="none",
        headers={"Unbroken-Mock": f"tokens={T}; drop_after=1"}, raise_on_error=False,
        retry=unbroken.Retry(attempts=1),
    ) as s:
        list(s)
    assert s.message.status.value == "interrupted"
    [span] = recorded.spans()
    assert "gen_ai.response.time_to_first_chunk" not in (span.attributes or {})
    assert len(recorded.points("gen_ai.client.operation.duration")) == 1
    assert recorded.points("gen_ai.client.operation.time_to_first_chunk") == []


def test_a_retry_before_any_output_is_an_event_of_the_one_span(mock_server: str) -> None:
    """The first attempt answers 503, the second streams: one operation, one retry event."""
    path, body, *_ = CALLS["anthropic"]
    with recording() as recorded, unbroken.stream(
        "POST", mock_server + path, dialect="anthropic", json=body,
        headers={"Unbroken-Mock": f"tokens={T}; status=503; status_times=1"},
        retry=unbroken.Retry(backoff=0.01),
    ) as s:
        list(s)
    assert s.connections == 2
    [span] = recorded.spans()
    assert [(e.name, dict(e.attributes or {})) for e in span.events] \
        == [("unbroken.retry", {"connection": 2, "after_seq": -1})]
    assert (span.attributes or {})["unbroken.retries"] == 1
    [duration] = recorded.points("gen_ai.client.operation.duration")
    assert duration.count == 1
    assert span.start_time is not None and span.events[0].timestamp > span.start_time


@pytest.mark.parametrize("how", ["parameter", "environment"])
def test_completion_content_is_recorded_only_when_asked(
    mock_server: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, body, *_ = CALLS["openai-chat"]
    if how == "environment":
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    options = {"capture_content": True} if how == "parameter" else {}
    with recording(**options) as recorded, unbroken.stream(
        "POST", mock_server + path, dialect="openai-chat", json=body,
        headers={"Unbroken-Mock": f"tokens={T}"},
    ) as s:
        list(s)
    [span] = recorded.spans()
    assert json.loads(str((span.attributes or {})["gen_ai.output.messages"])) == [
        {"role": "assistant", "parts": [{"type": "text", "content": s.message.text}],
         "finish_reason": "stop"}]
    assert json.loads(str((span.attributes or {})["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]}]


@pytest.mark.anyio
async def test_astream_records_the_same_span(mock_server: str) -> None:
    path, body, *_ = CALLS["gemini"]
    with recording() as recorded:
        async with unbroken.astream(
            "POST", mock_server + path, dialect="gemini", json=body,
            headers={"Unbroken-Mock": f"tokens={T}; finish=length"},
        ) as s:
            async for _event in s:
                await anyio.sleep(0)
    [span] = recorded.spans()
    assert span.name == "generate_content gemini-m"
    assert (span.attributes or {})["unbroken.status"] == "truncated"
    assert (span.attributes or {})["gen_ai.response.finish_reasons"] == ("MAX_TOKENS",)


def test_nothing_is_recorded_when_not_instrumented(mock_server: str) -> None:
    with recording() as recorded:
        pass
    run(mock_server, "openai-chat", "completed")
    assert recorded.spans() == []


@pytest.mark.parametrize("dialect", list(CALLS))
def test_each_chunk_interval_is_a_point_when_asked(mock_server: str, dialect: str) -> None:
    """``chunk_intervals="each"``: one time-per-output-chunk point per output frame after the
    first, as the conventions define it; together they span the first to the last output."""
    with recording(chunk_intervals="each") as recorded:
        message, _ = run(mock_server, dialect, "completed")
    times = output_times(message)
    assert len(times) >= 3  # three tokens of text at least
    [points] = recorded.points("gen_ai.client.operation.time_per_output_chunk")
    assert points.count == len(times) - 1
    assert points.sum == pytest.approx(times[-1] - times[0])
    [duration] = recorded.points("gen_ai.client.operation.duration")
    assert dict(points.attributes or {}) == dict(duration.attributes or {})


def test_chunk_intervals_is_mean_or_each() -> None:
    with pytest.raises(ValueError, match="'mean' or 'each', not 'all'"):
        unbroken.telemetry.instrument(chunk_intervals="all")  # type: ignore[arg-type]
    assert not unbroken.telemetry.instrumented()
