"""OpenAI Responses streaming: every response.* event type, the end events and their reasons."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest

from unbroken.dialects import detect_dialect, get_dialect
from unbroken.dialects.openai_responses import EVENT_TYPES, FINISH_REASONS
from unbroken.errors import PayloadError
from unbroken.events import (
    ErrorEvent,
    Event,
    Finish,
    MessageStart,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    UnknownEvent,
    Usage,
)
from unbroken.finish import FinishReason, Status
from unbroken.framing import ServerSentEvent


def sse(payload: dict[str, Any] | str) -> ServerSentEvent:
    if isinstance(payload, str):
        return ServerSentEvent(event="message", data=payload)
    return ServerSentEvent(event=payload["type"], data=json.dumps(payload))


def feed(payloads: list[dict[str, Any]]) -> list[Event]:
    """Run a fresh dialect over the payloads (seq 1, 2, ...); the last frame's events."""
    dialect = get_dialect("openai-responses")
    out: list[Event] = []
    for seq, payload in enumerate(payloads, start=1):
        frame = sse(payload)
        out = dialect.events(frame, dialect.load(frame), seq)
    return out


def response(status: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "status": status,
        "model": "gpt-4.1-2025-04-14",
        "output": [],
        "usage": None,
        **fields,
    }


USAGE = {
    "input_tokens": 37,
    "input_tokens_details": {"cached_tokens": 5},
    "output_tokens": 11,
    "output_tokens_details": {"reasoning_tokens": 3},
    "total_tokens": 48,
}
USAGE_EVENT = Usage(
    seq=1, input_tokens=37, output_tokens=11, total_tokens=48, reasoning_tokens=3, cached_tokens=5
)
FUNCTION_ITEM = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": "",
    "status": "in_progress",
}

MAPPED: dict[str, tuple[list[dict[str, Any]], dict[str, Any], list[Event]]] = {
    "response.created": (
        [],
        {"type": "response.created", "sequence_number": 0, "response": response("in_progress")},
        [MessageStart(seq=1, id="resp_1", model="gpt-4.1-2025-04-14")],
    ),
    "response.in_progress": (
        [],
        {"type": "response.in_progress", "sequence_number": 1, "response": response("in_progress")},
        [MessageStart(seq=1, id="resp_1", model="gpt-4.1-2025-04-14")],
    ),
    "response.queued": (
        [],
        {"type": "response.queued", "sequence_number": 0, "response": response("queued")},
        [MessageStart(seq=1, id="resp_1", model="gpt-4.1-2025-04-14")],
    ),
    "response.completed": (
        [],
        {
            "type": "response.completed",
            "sequence_number": 9,
            "response": response("completed", usage=USAGE),
        },
        [
            USAGE_EVENT,
            Finish(seq=1, status=Status.COMPLETED, reason=FinishReason.STOP, raw="completed"),
        ],
    ),
    "response.incomplete": (
        [],
        {
            "type": "response.incomplete",
            "sequence_number": 9,
            "response": response(
                "incomplete", usage=USAGE, incomplete_details={"reason": "max_output_tokens"}
            ),
        },
        [
            USAGE_EVENT,
            Finish(
                seq=1, status=Status.TRUNCATED, reason=FinishReason.LENGTH, raw="max_output_tokens"
            ),
        ],
    ),
    "response.failed": (
        [],
        {
            "type": "response.failed",
            "sequence_number": 9,
            "response": response("failed", error={"code": "server_error", "message": "boom"}),
        },
        [
            ErrorEvent(
                seq=1,
                type="server_error",
                message="boom",
                retryable=True,
                raw={
                    "type": "response.failed",
                    "sequence_number": 9,
                    "response": response(
                        "failed", error={"code": "server_error", "message": "boom"}
                    ),
                },
            )
        ],
    ),
    "error": (
        [],
        {
            "type": "error",
            "code": "ERR_SOMETHING",
            "message": "Something went wrong",
            "param": None,
            "sequence_number": 1,
        },
        [
            ErrorEvent(
                seq=1,
                type="ERR_SOMETHING",
                message="Something went wrong",
                retryable=False,
                raw={
                    "type": "error",
                    "code": "ERR_SOMETHING",
                    "message": "Something went wrong",
                    "param": None,
                    "sequence_number": 1,
                },
            )
        ],
    ),
    "response.output_item.added": (
        [],
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": FUNCTION_ITEM,
            "sequence_number": 3,
        },
        [ToolCallDelta(seq=1, index=1, id="call_1", name="get_weather", arguments="")],
    ),
    "response.output_text.delta": (
        [],
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hi",
            "logprobs": [],
            "sequence_number": 4,
        },
        [TextDelta(seq=1, text="Hi")],
    ),
    "response.function_call_arguments.delta": (
        [],
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 1,
            "delta": '{"location":',
            "sequence_number": 5,
        },
        [ToolCallDelta(seq=1, index=1, arguments='{"location":')],
    ),
    "response.custom_tool_call_input.delta": (
        [],
        {
            "type": "response.custom_tool_call_input.delta",
            "item_id": "ctc_1",
            "output_index": 2,
            "delta": "print(1)",
            "sequence_number": 5,
        },
        [ToolCallDelta(seq=1, index=2, arguments="print(1)")],
    ),
    "response.reasoning_summary_text.delta": (
        [],
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "delta": "**Thinking**",
            "sequence_number": 2,
        },
        [ReasoningDelta(seq=1, text="**Thinking**")],
    ),
    "response.reasoning_text.delta": (
        [],
        {
            "type": "response.reasoning_text.delta",
            "item_id": "rs_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "Let me analyze",
            "sequence_number": 2,
        },
        [ReasoningDelta(seq=1, text="Let me analyze")],
    ),
}

# Everything else the Responses API documents is kept as it is: hand-written, not from the table.
PASSED = [
    "response.output_item.done",
    "response.content_part.added",
    "response.content_part.done",
    "response.output_text.done",
    "response.output_text.annotation.added",
    "response.refusal.delta",
    "response.refusal.done",
    "response.function_call_arguments.done",
    "response.custom_tool_call_input.done",
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.done",
    "response.reasoning_text.done",
    "response.audio.delta",
    "response.audio.done",
    "response.audio.transcript.delta",
    "response.audio.transcript.done",
    "response.code_interpreter_call_code.delta",
    "response.code_interpreter_call_code.done",
    "response.code_interpreter_call.in_progress",
    "response.code_interpreter_call.interpreting",
    "response.code_interpreter_call.completed",
    "response.compaction.compacting",
    "response.file_search_call.in_progress",
    "response.file_search_call.searching",
    "response.file_search_call.completed",
    "response.web_search_call.in_progress",
    "response.web_search_call.searching",
    "response.web_search_call.completed",
    "response.image_generation_call.in_progress",
    "response.image_generation_call.generating",
    "response.image_generation_call.partial_image",
    "response.image_generation_call.completed",
    "response.mcp_call_arguments.delta",
    "response.mcp_call_arguments.done",
    "response.mcp_call.in_progress",
    "response.mcp_call.completed",
    "response.mcp_call.failed",
    "response.mcp_list_tools.in_progress",
    "response.mcp_list_tools.completed",
    "response.mcp_list_tools.failed",
    "response.shell_call_command.added",
    "response.shell_call_command.delta",
    "response.shell_call_command.done",
    "response.shell_call_output_content.delta",
    "response.shell_call_output_content.done",
    "response.steer",
    "response.steer.accepted",
    "response.steer.pending",
    "response.steer.failed",
]


def test_every_table_entry_has_a_case() -> None:
    assert sorted([*MAPPED, *PASSED]) == sorted(EVENT_TYPES)


@pytest.mark.parametrize("key", sorted(MAPPED))
def test_mapped_entry(key: str) -> None:
    before, frame, expected = MAPPED[key]
    assert feed([*before, frame]) == expected


@pytest.mark.parametrize("key", PASSED)
def test_passed_entry(key: str) -> None:
    payload = {"type": key, "output_index": 0, "item_id": "x_1", "sequence_number": 7}
    assert feed([payload]) == [UnknownEvent(seq=1, type=key, raw=payload)]


def test_table_covers_the_sdk_event_types() -> None:
    """The installed openai SDK's stream event union names no type the table lacks."""
    from openai.types.responses import ResponseStreamEvent

    members = typing.get_args(typing.get_args(ResponseStreamEvent)[0])
    sdk = {typing.get_args(m.model_fields["type"].annotation)[0] for m in members}
    assert sdk <= set(EVENT_TYPES)
    assert set(EVENT_TYPES) - sdk == {
        "response.steer",
        "response.steer.accepted",
        "response.steer.pending",
        "response.steer.failed",
    }


def completed(output: list[dict[str, Any]] | None) -> dict[str, Any]:
    body = response("completed", output=output)
    if output is None:
        del body["output"]
    return {"type": "response.completed", "sequence_number": 20, "response": body}


def incomplete(reason: str | None) -> dict[str, Any]:
    details = None if reason is None else {"reason": reason}
    return {
        "type": "response.incomplete",
        "sequence_number": 20,
        "response": response("incomplete", incomplete_details=details),
    }


END_CASES = [
    (
        "no tool",
        completed([{"type": "message", "content": []}]),
        Status.COMPLETED,
        FinishReason.STOP,
        "completed",
    ),
    (
        "function_call item",
        completed([FUNCTION_ITEM]),
        Status.COMPLETED,
        FinishReason.TOOL_CALLS,
        "completed",
    ),
    (
        "custom_tool_call item",
        completed([{"type": "custom_tool_call", "call_id": "c", "name": "n", "input": ""}]),
        Status.COMPLETED,
        FinishReason.TOOL_CALLS,
        "completed",
    ),
    (
        "max_output_tokens",
        incomplete("max_output_tokens"),
        Status.TRUNCATED,
        FinishReason.LENGTH,
        "max_output_tokens",
    ),
    (
        "content_filter",
        incomplete("content_filter"),
        Status.FILTERED,
        FinishReason.CONTENT_FILTER,
        "content_filter",
    ),
    (
        "max_messages",
        incomplete("max_messages"),
        Status.COMPLETED,
        FinishReason.OTHER,
        "max_messages",
    ),
    ("no reason", incomplete(None), Status.COMPLETED, FinishReason.OTHER, "incomplete"),
]


def test_every_finish_reason_has_a_case() -> None:
    assert {"completed", "max_output_tokens", "content_filter"} == set(FINISH_REASONS)


@pytest.mark.parametrize(
    ("payload", "status", "reason", "raw"),
    [case[1:] for case in END_CASES],
    ids=[case[0] for case in END_CASES],
)
def test_end_event(payload: dict[str, Any], status: Status, reason: FinishReason, raw: str) -> None:
    assert feed([payload]) == [Finish(seq=1, status=status, reason=reason, raw=raw)]


def test_completed_without_output_trusts_the_streamed_items() -> None:
    added = MAPPED["response.output_item.added"][1]
    assert feed([added, completed(None)]) == [
        Finish(seq=2, status=Status.COMPLETED, reason=FinishReason.TOOL_CALLS, raw="completed")
    ]
    assert feed([completed(None)]) == [
        Finish(seq=1, status=Status.COMPLETED, reason=FinishReason.STOP, raw="completed")
    ]


def test_a_replayed_tool_item_does_not_count() -> None:
    dialect = get_dialect("openai-responses")
    ping = sse(
        {"type": "response.in_progress", "sequence_number": 5, "response": response("in_progress")}
    )
    dialect.events(ping, dialect.load(ping), 5)
    replay = sse(MAPPED["response.output_item.added"][1])
    assert dialect.events(replay, dialect.load(replay), 3) == [
        ToolCallDelta(seq=3, index=1, id="call_1", name="get_weather")
    ]
    end = sse(completed(None))
    assert dialect.events(end, dialect.load(end), 6) == [
        Finish(seq=6, status=Status.COMPLETED, reason=FinishReason.STOP, raw="completed")
    ]


@pytest.mark.parametrize(
    ("code", "retryable"),
    [
        ("server_error", True),
        ("rate_limit_exceeded", True),
        ("invalid_prompt", False),
        ("vector_store_timeout", False),
        ("image_content_policy_violation", False),
    ],
)
def test_failed_retryability(code: str, retryable: bool) -> None:
    payload = {
        "type": "response.failed",
        "sequence_number": 3,
        "response": response("failed", error={"code": code, "message": "m"}),
    }
    assert feed([payload]) == [
        ErrorEvent(seq=1, type=code, message="m", retryable=retryable, raw=payload)
    ]


def test_error_event_nested_by_a_relay() -> None:
    payload = {
        "type": "error",
        "sequence_number": 2,
        "error": {"type": "server_error", "code": None, "message": "m"},
    }
    assert feed([payload]) == [
        ErrorEvent(seq=1, type="server_error", message="m", retryable=True, raw=payload)
    ]


def test_failed_without_error_object() -> None:
    payload = {
        "type": "response.failed",
        "sequence_number": 3,
        "response": response("failed", error=None),
    }
    assert feed([payload]) == [
        ErrorEvent(seq=1, type="response.failed", message="", retryable=False, raw=payload)
    ]


def test_message_item_added_is_passed_through() -> None:
    payload = {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {
            "id": "msg_1",
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        },
        "sequence_number": 2,
    }
    assert feed([payload]) == [UnknownEvent(seq=1, type="response.output_item.added", raw=payload)]


def test_provider_seq_is_the_sequence_number() -> None:
    dialect = get_dialect("openai-responses")
    assert dialect.provider_seq({"type": "response.created", "sequence_number": 0}) == 0
    assert dialect.provider_seq({"type": "response.output_text.delta", "sequence_number": 41}) == 41
    assert dialect.provider_seq({"type": "response.output_text.delta"}) is None
    assert dialect.provider_seq(dialect.load(sse("[DONE]"))) is None


def test_unknown_event_type_is_passed_through() -> None:
    payload = {"type": "response.hologram.delta", "sequence_number": 3}
    assert feed([payload]) == [UnknownEvent(seq=1, type="response.hologram.delta", raw=payload)]


def test_event_name_used_when_the_data_has_no_type() -> None:
    dialect = get_dialect("openai-responses")
    frame = ServerSentEvent(
        event="response.output_text.delta", data='{"delta": "x", "sequence_number": 1}'
    )
    assert dialect.events(frame, dialect.load(frame), 1) == [TextDelta(seq=1, text="x")]


def test_done_from_a_relay_is_an_end_marker() -> None:
    dialect = get_dialect("openai-responses")
    frame = sse("[DONE]")
    assert dialect.events(frame, dialect.load(frame), 9) == [StreamEnd(seq=9, marker="[DONE]")]


def test_malformed_json_is_a_payload_error() -> None:
    with pytest.raises(PayloadError, match="malformed JSON"):
        get_dialect("openai-responses").load(
            ServerSentEvent(event="response.output_text.delta", data="{")
        )


def test_detection() -> None:
    created = sse(MAPPED["response.created"][1])
    assert detect_dialect(created) == "openai-responses"
    error = sse(MAPPED["error"][1])
    assert detect_dialect(error) == "openai-responses"
    unnamed = ServerSentEvent(event="message", data=json.dumps(MAPPED["response.created"][1]))
    assert detect_dialect(unnamed) == "openai-responses"


def test_empty_argument_fragment_is_passed_through() -> None:
    payload = {
        "type": "response.function_call_arguments.delta",
        "item_id": "fc_1",
        "output_index": 1,
        "delta": "",
        "sequence_number": 5,
    }
    assert feed([payload]) == [
        UnknownEvent(seq=1, type="response.function_call_arguments.delta", raw=payload)
    ]
