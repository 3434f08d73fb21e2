"""bedrock-invoke: InvokeModelWithResponseStream for Claude, read from its event-stream messages.

Bodies are built as Bedrock sends them: each of Anthropic's Messages events, its JSON bytes
base64 in a ``chunk`` message's ``{"bytes": ...}`` (written by the mock's encoder, which boto3
reads in tests/integration/test_bedrock_invoke.py), the invocation's token counts in
``amazon-bedrock-invocationMetrics`` of the last event.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from unbroken import from_bedrock, parse
from unbroken.dialects import detect_dialect, get_dialect, sniff_dialect, sniff_framing
from unbroken.errors import PayloadError, ProviderError
from unbroken.events import StreamEnd, TextDelta, UnknownEvent, Usage
from unbroken.finish import FinishReason, Status
from unbroken.framing import EVENT_STREAM, EventStreamDecoder
from unbroken.mock.wire import PlannedFrame, event_stream_message

START = {"type": "message_start", "message": {
    "id": "msg_bdrk_01", "type": "message", "role": "assistant", "model": "claude-3-haiku",
    "content": [], "stop_reason": None, "usage": {"input_tokens": 11, "output_tokens": 1}}}
BLOCK = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
METRICS = {"inputTokenCount": 11, "outputTokenCount": 6, "invocationLatency": 812,
           "firstByteLatency": 300, "cacheReadInputTokenCount": 3}


def delta(text: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}}


def stop(reason: str) -> list[dict[str, Any]]:
    return [{"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None},
             "usage": {"output_tokens": 6}},
            {"type": "message_stop", "amazon-bedrock-invocationMetrics": METRICS}]


def message(event_type: str, data: bytes, *, exception: bool = False) -> bytes:
    return event_stream_message(PlannedFrame(event=event_type, data=data, exception=exception))


def chunk(event: dict[str, Any]) -> bytes:
    encoded = base64.b64encode(json.dumps(event, ensure_ascii=False).encode()).decode()
    return message("chunk", json.dumps({"bytes": encoded, "p": "abc"}).encode())


def body(*events: dict[str, Any]) -> bytes:
    return b"".join(chunk(event) for event in events)


TEXT = ["Bonjour", ", le ", "monde 🌍"]
WHOLE = body(START, BLOCK, *map(delta, TEXT), *stop("end_turn"))


@pytest.mark.parametrize("dialect", ["bedrock-invoke", "auto"])
def test_exact_text_usage_and_finish(dialect: str) -> None:
    for chunks in ([WHOLE], [WHOLE[i : i + 1] for i in range(len(WHOLE))]):
        got = parse(chunks, dialect=dialect)
        assert (got.status, got.finish_reason, got.raw_finish_reason) == (
            Status.COMPLETED, FinishReason.STOP, "end_turn")
        assert got.text == "Bonjour, le monde 🌍"
        assert (got.id, got.model) == ("msg_bdrk_01", "claude-3-haiku")
        assert got.usage is not None
        # the invocation's metrics, last: input and output of the whole invocation
        assert (got.usage.input_tokens, got.usage.output_tokens, got.usage.cached_tokens) == (
            11, 6, 3)
        assert got.last_seq == 8
        assert got.trace is not None and got.trace.warnings == []


@pytest.mark.parametrize(
    ("raw", "status", "reason"),
    [
        ("end_turn", Status.COMPLETED, FinishReason.STOP),
        ("stop_sequence", Status.COMPLETED, FinishReason.STOP),
        ("tool_use", Status.COMPLETED, FinishReason.TOOL_CALLS),
        ("max_tokens", Status.TRUNCATED, FinishReason.LENGTH),
        ("refusal", Status.FILTERED, FinishReason.CONTENT_FILTER),
        ("a_future_reason", Status.COMPLETED, FinishReason.OTHER),
    ],
)
def test_stop_reasons(raw: str, status: Status, reason: FinishReason) -> None:
    got = parse([body(START, BLOCK, delta("x"), *stop(raw))], dialect="bedrock-invoke")
    assert (got.status, got.finish_reason, got.raw_finish_reason) == (status, reason, raw)


def test_the_metrics_come_before_the_end_marker_of_the_same_message() -> None:
    dialect = get_dialect("bedrock-invoke")
    [frame] = EventStreamDecoder().receive_data(chunk(stop("end_turn")[-1]))
    events = dialect.events(frame, dialect.load(frame), 9)
    assert events == [Usage(seq=9, input_tokens=11, output_tokens=6, cached_tokens=3),
                      StreamEnd(seq=9, marker="message_stop")]


def test_a_tool_call() -> None:
    tool = {"type": "content_block_start", "index": 1, "content_block": {
        "type": "tool_use", "id": "toolu_bdrk_9", "name": "get_weather", "input": {}}}
    parts = ['{"city": "東', '京"}']
    args = [{"type": "content_block_delta", "index": 1,
             "delta": {"type": "input_json_delta", "partial_json": part}} for part in parts]
    got = parse([body(START, tool, *args, *stop("tool_use"))], dialect="bedrock-invoke")
    [call] = got.tool_calls
    assert (call.id, call.name, call.arguments, call.value) == (
        "toolu_bdrk_9", "get_weather", '{"city": "東京"}', {"city": "東京"})
    assert got.finish_reason is FinishReason.TOOL_CALLS


@pytest.mark.parametrize(
    ("payload", "detail"),
    [
        (b'{"bytes": "eyJ0eXBlIjoi!!!"}', "a chunk's bytes are not base64"),
        (b'{"bytes": "eyJ0eXBlI"}', "a chunk's bytes are not base64"),  # a partial quantum
        (json.dumps({"bytes": base64.b64encode(b'{"type": "message_st').decode()}).encode(),
         "malformed JSON in the chunk's bytes"),
        (json.dumps({"bytes": base64.b64encode(b"[1, 2]").decode()}).encode(),
         "chunk's bytes is JSON list, expected an object"),
        (json.dumps({"bytes": base64.b64encode(b"\xff\xfe").decode()}).encode(),
         "malformed JSON in the chunk's bytes"),
        (b'{"bytes": 12}', "a chunk without its base64 bytes"),
        (b'{"bytes": "e30=", "p": ', "malformed JSON in the payload"),
    ],
)
def test_a_bad_chunk_is_a_payload_error_and_keeps_what_came(payload: bytes, detail: str) -> None:
    good = body(START, BLOCK, delta("kept"))
    got = parse([good + message("chunk", payload) + chunk(delta("never"))],
                dialect="bedrock-invoke")
    assert got.status is Status.FAILED
    assert isinstance(got.error, PayloadError)
    assert f"bedrock-invoke: {detail}" in str(got.error)
    assert got.text == "kept"
    assert got.error.line == 4  # the fourth message


@pytest.mark.parametrize(
    ("kind", "retryable"),
    [("throttlingException", True), ("modelStreamErrorException", True),
     ("internalServerException", True), ("serviceUnavailableException", True),
     ("modelTimeoutException", True), ("validationException", False)],
)
def test_an_exception_message_is_the_providers_error(kind: str, retryable: bool) -> None:
    data = body(START, BLOCK, delta("so far")) + message(
        kind, b'{"message": "Too many requests"}', exception=True)
    got = parse([data], dialect="bedrock-invoke")
    assert (got.status, got.finish_reason) == (Status.FAILED, FinishReason.ERROR)
    assert isinstance(got.error, ProviderError)
    assert (got.error.event.type, got.error.event.message, got.error.retryable) == (
        kind, "Too many requests", retryable)
    assert got.text == "so far"


def test_a_cut_inside_a_message_is_interrupted() -> None:
    before = body(START, BLOCK, *map(delta, TEXT), stop("end_turn")[0])
    finish = chunk(stop("end_turn")[1])
    got = parse([before + finish[: len(finish) // 2]], dialect="bedrock-invoke")
    assert (got.status, got.finish_reason) == (Status.INTERRUPTED, None)
    assert got.text == "Bonjour, le monde 🌍"
    kinds = [warning.code for warning in got.trace.warnings] if got.trace else []
    assert "unterminated_tail" in kinds and "truncated_utf8" not in kinds


def test_the_end_marker_cut_off_after_the_finish_is_noticed() -> None:
    got = parse([WHOLE[: len(WHOLE) - 40]], dialect="bedrock-invoke")
    assert (got.status, got.raw_finish_reason) == (Status.COMPLETED, "end_turn")
    assert got.trace is not None
    # message_stop is the end marker, as in Anthropic's own stream
    assert [warning.code for warning in got.trace.warnings] == [
        "unterminated_tail", "no_end_marker"]


def test_a_chunk_without_an_event_type_passes_through() -> None:
    dialect = get_dialect("bedrock-invoke")
    [frame] = EventStreamDecoder().receive_data(chunk({"delta": "no type"}))
    payload = dialect.load(frame)
    assert dialect.events(frame, payload, 1) == [
        UnknownEvent(seq=1, type="chunk", raw={"delta": "no type"})]


def test_auto_tells_the_two_bedrock_operations_by_the_first_message() -> None:
    assert sniff_dialect(0) is None  # two dialects share the event stream
    assert sniff_framing(0) is EVENT_STREAM
    assert sniff_framing(ord("{")) is not EVENT_STREAM
    [invoke] = EventStreamDecoder().receive_data(chunk(START))
    assert detect_dialect(invoke) == "bedrock-invoke"
    [converse] = EventStreamDecoder().receive_data(message("messageStart", b'{"role": "x"}'))
    assert detect_dialect(converse) == "bedrock-converse"
    got = parse([message("messageStart", b'{"role": "assistant"}'),
                 message("contentBlockDelta", b'{"contentBlockIndex": 0, "delta": {"text": "a"}}'),
                 message("messageStop", b'{"stopReason": "end_turn"}')], dialect="auto")
    assert (got.status, got.text) == (Status.COMPLETED, "a")


def test_a_replayed_message_moves_no_state() -> None:
    dialect = get_dialect("bedrock-invoke")
    frames = EventStreamDecoder().receive_data(body(START, BLOCK, delta("a"), delta("b")))
    seen = [dialect.events(f, dialect.load(f), n) for n, f in enumerate(frames, 1)]
    again = dialect.events(frames[2], dialect.load(frames[2]), 3)
    assert again == seen[2] == [TextDelta(seq=3, text="a")]


# -- from_bedrock over what botocore yields: {"chunk": {"bytes": <the event's JSON bytes>}} ------


def botocore_events(*events: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"chunk": {"bytes": json.dumps(event).encode()}} for event in events]


def test_from_bedrock_reads_boto3s_invoke_events() -> None:
    tracked = from_bedrock(botocore_events(START, BLOCK, *map(delta, TEXT), *stop("max_tokens")))
    assert len(list(tracked)) == 8
    got = tracked.message
    assert (got.status, got.finish_reason, got.text) == (
        Status.TRUNCATED, FinishReason.LENGTH, "Bonjour, le monde 🌍")
    assert got.usage is not None and (got.usage.input_tokens, got.usage.output_tokens) == (11, 6)


def test_from_bedrock_fails_on_chunk_bytes_that_are_not_json() -> None:
    events = [*botocore_events(START, BLOCK, delta("kept")), {"chunk": {"bytes": b'{"type": '}}]
    tracked = from_bedrock({"body": events, "contentType": "application/json"})
    with pytest.raises(PayloadError, match="from_bedrock: a chunk's bytes are not JSON"):
        list(tracked)
    assert tracked.message.status is Status.FAILED
    assert isinstance(tracked.message.error, PayloadError)
    assert tracked.message.text == "kept"
