"""Anthropic Messages streaming: every event type, block kind and stop reason (hand-written)."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest

from unbroken.dialects import detect_dialect, get_dialect
from unbroken.dialects.anthropic import EVENT_TYPES, STOP_REASONS
from unbroken.errors import PayloadError
from unbroken.events import (
    ErrorEvent,
    Event,
    Finish,
    MessageStart,
    Ping,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    UnknownEvent,
    Usage,
)
from unbroken.finish import FinishReason, Status
from unbroken.framing import ServerSentEvent, SSEDecoder


def sse(payload: dict[str, Any] | str, event: str | None = None) -> ServerSentEvent:
    if isinstance(payload, str):
        return ServerSentEvent(event=event or "message", data=payload)
    return ServerSentEvent(event=event or payload["type"], data=json.dumps(payload))


def feed(payloads: list[dict[str, Any]]) -> list[Event]:
    """Run a fresh dialect over the payloads (seq 1, 2, ...); the last frame's events."""
    dialect = get_dialect("anthropic")
    out: list[Event] = []
    for seq, payload in enumerate(payloads, start=1):
        frame = sse(payload)
        out = dialect.events(frame, dialect.load(frame), seq)
    return out


TOOL_START = {
    "type": "content_block_start",
    "index": 1,
    "content_block": {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {}},
}


def block(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": 2, "content_block": {"type": kind, **fields}}


def delta(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 1, "delta": {"type": kind, **fields}}


def passed(seq: int, kind: str, payload: dict[str, Any]) -> list[Event]:
    return [UnknownEvent(seq=seq, type=kind, raw=payload)]


# key -> (frames before, the frame, expected events of that frame at seq len(before) + 1)
CASES: dict[str, tuple[list[dict[str, Any]], dict[str, Any], list[Event]]] = {
    "message_start": (
        [],
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-sonnet-4-5",
                "stop_reason": None,
                "usage": {"input_tokens": 25, "output_tokens": 1, "cache_read_input_tokens": 7},
            },
        },
        [
            MessageStart(seq=1, id="msg_1", model="claude-sonnet-4-5"),
            Usage(seq=1, input_tokens=25, output_tokens=1, cached_tokens=7),
        ],
    ),
    "content_block_start": (
        [],
        block("text", text=""),
        passed(1, "content_block_start", block("text", text="")),
    ),
    "content_block_delta": (
        [],
        delta("future_delta", value=1),
        passed(1, "content_block_delta/future_delta", delta("future_delta", value=1)),
    ),
    "content_block_stop": (
        [],
        {"type": "content_block_stop", "index": 0},
        passed(1, "content_block_stop", {"type": "content_block_stop", "index": 0}),
    ),
    "message_delta": (
        [],
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 15},
        },
        [
            Usage(seq=1, output_tokens=15),
            Finish(seq=1, status=Status.COMPLETED, reason=FinishReason.STOP, raw="end_turn"),
        ],
    ),
    "message_stop": ([], {"type": "message_stop"}, [StreamEnd(seq=1, marker="message_stop")]),
    "ping": ([], {"type": "ping"}, [Ping(seq=1)]),
    "error": (
        [],
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        [
            ErrorEvent(
                seq=1,
                type="overloaded_error",
                message="Overloaded",
                retryable=True,
                raw={
                    "type": "error",
                    "error": {"type": "overloaded_error", "message": "Overloaded"},
                },
            )
        ],
    ),
    "content_block_start/text": ([], block("text", text="Hi"), [TextDelta(seq=1, text="Hi")]),
    "content_block_start/thinking": (
        [],
        block("thinking", thinking="", signature="sig-0"),
        [ReasoningDelta(seq=1, text="", signature="sig-0")],
    ),
    "content_block_start/redacted_thinking": (
        [],
        block("redacted_thinking", data="EmwKAhgB"),
        passed(
            1,
            "content_block_start/redacted_thinking",
            block("redacted_thinking", data="EmwKAhgB"),
        ),
    ),
    "content_block_start/tool_use": (
        [],
        TOOL_START,
        [ToolCallDelta(seq=1, index=1, id="toolu_01", name="get_weather", arguments="")],
    ),
    "content_block_delta/text_delta": (
        [],
        delta("text_delta", text="ello frien"),
        [TextDelta(seq=1, text="ello frien")],
    ),
    "content_block_delta/input_json_delta": (
        [TOOL_START],
        delta("input_json_delta", partial_json='{"location": "San Fra'),
        [ToolCallDelta(seq=2, index=1, arguments='{"location": "San Fra')],
    ),
    "content_block_delta/citations_delta": (
        [],
        delta("citations_delta", citation={"type": "char_location", "cited_text": "x"}),
        passed(
            1,
            "content_block_delta/citations_delta",
            delta("citations_delta", citation={"type": "char_location", "cited_text": "x"}),
        ),
    ),
    "content_block_delta/thinking_delta": (
        [],
        delta("thinking_delta", thinking="Let me solve this"),
        [ReasoningDelta(seq=1, text="Let me solve this")],
    ),
    "content_block_delta/signature_delta": (
        [],
        delta("signature_delta", signature="EqQBCgIYAhIM"),
        [ReasoningDelta(seq=1, text="", signature="EqQBCgIYAhIM")],
    ),
}

SERVER_BLOCKS = [
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "container_upload",
]
for _kind in SERVER_BLOCKS:
    _frame = block(_kind, id="srvtoolu_1")
    CASES[f"content_block_start/{_kind}"] = (
        [],
        _frame,
        passed(1, f"content_block_start/{_kind}", _frame),
    )


def test_every_table_entry_has_a_case() -> None:
    assert sorted(CASES) == sorted(EVENT_TYPES)


@pytest.mark.parametrize("key", sorted(CASES))
def test_table_entry(key: str) -> None:
    before, frame, expected = CASES[key]
    assert feed([*before, frame]) == expected


def test_table_covers_the_sdk_event_and_block_types() -> None:
    """The installed anthropic SDK's unions name no type the table lacks."""
    from anthropic.types import raw_content_block_delta, raw_content_block_start_event
    from anthropic.types.raw_message_stream_event import RawMessageStreamEvent

    def literal_types(union: Any) -> set[str]:
        members = typing.get_args(typing.get_args(union)[0])
        return {typing.get_args(m.model_fields["type"].annotation)[0] for m in members}

    top = {key for key in EVENT_TYPES if "/" not in key}
    assert literal_types(RawMessageStreamEvent) | {"ping", "error"} == top
    blocks = literal_types(raw_content_block_start_event.ContentBlock)
    assert {f"content_block_start/{kind}" for kind in blocks} <= set(EVENT_TYPES)
    deltas = literal_types(raw_content_block_delta.RawContentBlockDelta)
    assert {f"content_block_delta/{kind}" for kind in deltas} <= set(EVENT_TYPES)


STOP_CASES = [
    ("end_turn", Status.COMPLETED, FinishReason.STOP),
    ("stop_sequence", Status.COMPLETED, FinishReason.STOP),
    ("tool_use", Status.COMPLETED, FinishReason.TOOL_CALLS),
    ("pause_turn", Status.COMPLETED, FinishReason.PAUSE),
    ("max_tokens", Status.TRUNCATED, FinishReason.LENGTH),
    ("model_context_window_exceeded", Status.TRUNCATED, FinishReason.LENGTH),
    ("refusal", Status.FILTERED, FinishReason.CONTENT_FILTER),
    ("a_reason_from_2030", Status.COMPLETED, FinishReason.OTHER),
]


def test_every_stop_reason_has_a_case() -> None:
    assert {raw for raw, _, _ in STOP_CASES} - {"a_reason_from_2030"} == set(STOP_REASONS)


@pytest.mark.parametrize(("raw", "status", "reason"), STOP_CASES)
def test_stop_reason(raw: str, status: Status, reason: FinishReason) -> None:
    frame = {"type": "message_delta", "delta": {"stop_reason": raw}, "usage": {"output_tokens": 3}}
    assert feed([frame])[-1] == Finish(seq=1, status=status, reason=reason, raw=raw)


@pytest.mark.parametrize(
    ("error_type", "retryable"),
    [
        ("overloaded_error", True),
        ("rate_limit_error", True),
        ("api_error", True),
        ("timeout_error", True),
        ("invalid_request_error", False),
        ("authentication_error", False),
        ("permission_error", False),
        ("not_found_error", False),
        ("request_too_large", False),
        ("billing_error", False),
    ],
)
def test_error_retryability(error_type: str, retryable: bool) -> None:
    payload = {"type": "error", "error": {"type": error_type, "message": "m"}}
    [event] = feed([payload])
    assert event == ErrorEvent(
        seq=1, type=error_type, message="m", retryable=retryable, raw=payload
    )


def test_message_delta_without_stop_reason_is_usage_only() -> None:
    payload = {
        "type": "message_delta",
        "delta": {"stop_reason": None},
        "usage": {"output_tokens": 9},
    }
    assert feed([payload]) == [Usage(seq=1, output_tokens=9)]


def test_cumulative_usage_with_thinking_tokens() -> None:
    payload = {
        "type": "message_delta",
        "delta": {},
        "usage": {
            "input_tokens": 10682,
            "cache_read_input_tokens": 0,
            "output_tokens": 510,
            "output_tokens_details": {"thinking_tokens": 200},
        },
    }
    assert feed([payload]) == [
        Usage(seq=1, input_tokens=10682, output_tokens=510, reasoning_tokens=200, cached_tokens=0)
    ]


def test_input_json_of_a_server_tool_is_not_a_client_tool_call() -> None:
    server = block("server_tool_use", id="srvtoolu_1", name="web_search", input={})
    server["index"] = 1
    fragment = delta("input_json_delta", partial_json='{"query')
    assert feed([server, fragment]) == passed(2, "content_block_delta/input_json_delta", fragment)


def test_empty_input_json_fragment_is_passed_through() -> None:
    fragment = delta("input_json_delta", partial_json="")
    assert feed([TOOL_START, fragment]) == passed(2, "content_block_delta", fragment)


def test_message_start_once_per_stream() -> None:
    start = CASES["message_start"][1]
    assert feed([start, start]) == [Usage(seq=2, input_tokens=25, output_tokens=1, cached_tokens=7)]


def test_unknown_event_type_is_passed_through() -> None:
    payload = {"type": "message_compaction", "index": 3}
    assert feed([payload]) == passed(1, "message_compaction", payload)


def test_done_sentinel_from_a_relay_is_an_end_marker() -> None:
    dialect = get_dialect("anthropic")
    frame = sse("[DONE]")
    assert dialect.events(frame, dialect.load(frame), 4) == [StreamEnd(seq=4, marker="[DONE]")]


def test_malformed_json_is_a_payload_error() -> None:
    dialect = get_dialect("anthropic")
    with pytest.raises(PayloadError, match="malformed JSON"):
        dialect.load(sse('{"type": "ping"', event="ping"))


def test_json_that_is_not_an_object_is_a_payload_error() -> None:
    with pytest.raises(PayloadError, match="expected an object"):
        get_dialect("anthropic").load(sse("[1, 2]", event="ping"))


def test_undocumented_shape_is_a_payload_error() -> None:
    dialect = get_dialect("anthropic")
    frame = sse({"type": "content_block_delta", "index": 0, "delta": "text"})
    with pytest.raises(PayloadError, match="unexpected payload shape"):
        dialect.events(frame, dialect.load(frame), 1)


def test_a_replayed_frame_does_not_register_a_tool_block() -> None:
    dialect = get_dialect("anthropic")
    first = sse({"type": "ping"})
    dialect.events(first, dialect.load(first), 5)
    replay = sse(TOOL_START)
    # parsed for the trace ...
    assert dialect.events(replay, dialect.load(replay), 3) == [
        ToolCallDelta(seq=3, index=1, id="toolu_01", name="get_weather")
    ]
    # ... but the stream's state did not take it in: block 1 is not a tool call
    fragment = sse(delta("input_json_delta", partial_json="{}"))
    assert dialect.events(fragment, dialect.load(fragment), 6) == passed(
        6, "content_block_delta/input_json_delta", delta("input_json_delta", partial_json="{}")
    )


def test_documented_basic_stream() -> None:
    """The "Basic streaming request" response of the Messages streaming docs."""
    body = (
        b"event: message_start\n"
        b'data: {"type": "message_start", "message": {"id": '
        b'"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", '
        b'"content": [], "model": '
        b'"claude-sonnet-4-5-20250929", "stop_reason": null, "stop_sequence": null, "usage": '
        b'{"input_tokens": 25, "output_tokens": 1}}}\n\n'
        b"event: content_block_start\n"
        b'data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", '
        b'"text": ""}}\n\n'
        b'event: ping\ndata: {"type": "ping"}\n\n'
        b"event: content_block_delta\n"
        b'data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", '
        b'"text": "Hello"}}\n\n'
        b"event: content_block_delta\n"
        b'data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", '
        b'"text": "!"}}\n\n'
        b'event: content_block_stop\ndata: {"type": "content_block_stop", "index": 0}\n\n'
        b"event: message_delta\n"
        b'data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", '
        b'"stop_sequence":null}, "usage": {"output_tokens": 15}}\n\n'
        b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
    )
    decoder = SSEDecoder()
    frames = decoder.receive_data(body) + decoder.receive_eof()
    assert [detect_dialect(frame) for frame in frames] == ["anthropic"] * 8
    dialect = get_dialect("anthropic")
    kinds = [
        [type(event).__name__ for event in dialect.events(frame, dialect.load(frame), seq)]
        for seq, frame in enumerate(frames, start=1)
    ]
    assert kinds == [
        ["MessageStart", "Usage"],
        ["UnknownEvent"],
        ["Ping"],
        ["TextDelta"],
        ["TextDelta"],
        ["UnknownEvent"],
        ["Usage", "Finish"],
        ["StreamEnd"],
    ]
    assert dialect.provider_seq(dialect.load(frames[0])) is None


def test_event_name_used_when_the_data_has_no_type() -> None:
    dialect = get_dialect("anthropic")
    frame = ServerSentEvent(event="ping", data="{}")
    assert dialect.events(frame, dialect.load(frame), 1) == [Ping(seq=1)]


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "error"},
        {"type": "error", "error": "Overloaded"},
        {"type": "error", "error": {"message": 529}},
    ],
)
def test_error_without_a_usable_error_object(payload: dict[str, Any]) -> None:
    assert feed([payload]) == [
        ErrorEvent(seq=1, type="error", message="", retryable=False, raw=payload)
    ]


@pytest.mark.parametrize(
    "payload",
    [
        delta("text_delta", text=""),
        delta("thinking_delta", thinking=""),
        delta("signature_delta", signature=""),
        {"type": "content_block_start", "index": "1", "content_block": {"type": "tool_use"}},
        {"type": "message_delta", "delta": {}, "usage": {}},
        {"type": "message_start", "message": {"usage": None}},
    ],
    ids=["text", "thinking", "signature", "tool_use-index", "empty-usage", "no-usage"],
)
def test_frames_that_say_nothing_are_passed_through(payload: dict[str, Any]) -> None:
    assert feed([payload]) == passed(1, payload["type"], payload)
