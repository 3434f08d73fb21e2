"""OpenAI Chat Completions streaming: every frame kind, delta field and finish reason."""

from __future__ import annotations

import json
from typing import Any

import pytest

from unbroken.dialects import detect_dialect, get_dialect
from unbroken.dialects.openai_chat import EVENT_TYPES, FINISH_REASONS
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
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return ServerSentEvent(event="message", data=data)


def feed(payloads: list[dict[str, Any] | str]) -> list[Event]:
    """Run a fresh dialect over the payloads (seq 1, 2, ...); the last frame's events."""
    dialect = get_dialect("openai-chat")
    out: list[Event] = []
    for seq, payload in enumerate(payloads, start=1):
        frame = sse(payload)
        out = dialect.events(frame, dialect.load(frame), seq)
    return out


def chunk(
    delta: dict[str, Any], finish_reason: str | None = None, index: int = 0
) -> dict[str, Any]:
    """A chunk as OpenAI sends it after the first (id and model repeat on every chunk)."""
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": "gpt-4o-mini",
        "choices": [
            {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        ],
    }


FIRST = chunk({"role": "assistant", "content": ""})
START = MessageStart(seq=1, id="chatcmpl-123", model="gpt-4o-mini")

CASES: dict[str, tuple[list[dict[str, Any] | str], dict[str, Any] | str, list[Event]]] = {
    "chat.completion.chunk": ([], FIRST, [START]),
    "error": (
        [],
        {"error": {"message": "The server had an error", "type": "server_error", "code": None}},
        [
            ErrorEvent(
                seq=1,
                type="server_error",
                message="The server had an error",
                retryable=True,
                raw={
                    "error": {
                        "message": "The server had an error",
                        "type": "server_error",
                        "code": None,
                    }
                },
            )
        ],
    ),
    "[DONE]": ([], "[DONE]", [StreamEnd(seq=1, marker="[DONE]")]),
    "delta/content": ([FIRST], chunk({"content": "Hello"}), [TextDelta(seq=2, text="Hello")]),
    "delta/reasoning_content": (
        [FIRST],
        chunk({"content": None, "reasoning_content": "Let me think"}),
        [ReasoningDelta(seq=2, text="Let me think")],
    ),
    "delta/reasoning": (
        [FIRST],
        chunk({"reasoning": "Hmm"}),
        [ReasoningDelta(seq=2, text="Hmm")],
    ),
    "delta/tool_calls": (
        [FIRST],
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_abc123",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        [ToolCallDelta(seq=2, index=0, id="call_abc123", name="get_weather", arguments="")],
    ),
    "delta/function_call": (
        [FIRST],
        chunk({"function_call": {"name": "get_weather", "arguments": '{"lo'}}),
        [ToolCallDelta(seq=2, index=0, name="get_weather", arguments='{"lo')],
    ),
    "delta/role": (
        [FIRST],
        chunk({"role": "assistant"}),
        [UnknownEvent(seq=2, type="chat.completion.chunk", raw=chunk({"role": "assistant"}))],
    ),
    "delta/refusal": (
        [FIRST],
        chunk({"refusal": "I can't help with that."}),
        [
            UnknownEvent(
                seq=2, type="delta/refusal", raw=chunk({"refusal": "I can't help with that."})
            )
        ],
    ),
    "delta/audio": (
        [FIRST],
        chunk({"audio": {"id": "audio_1", "data": "UklGR"}}),
        [
            UnknownEvent(
                seq=2, type="delta/audio", raw=chunk({"audio": {"id": "audio_1", "data": "UklGR"}})
            )
        ],
    ),
}


def test_every_table_entry_has_a_case() -> None:
    assert sorted(CASES) == sorted(EVENT_TYPES)


@pytest.mark.parametrize("key", sorted(CASES))
def test_table_entry(key: str) -> None:
    before, frame, expected = CASES[key]
    assert feed([*before, frame]) == expected


FINISH_CASES = [
    ("stop", Status.COMPLETED, FinishReason.STOP),
    ("tool_calls", Status.COMPLETED, FinishReason.TOOL_CALLS),
    ("function_call", Status.COMPLETED, FinishReason.TOOL_CALLS),
    ("length", Status.TRUNCATED, FinishReason.LENGTH),
    ("content_filter", Status.FILTERED, FinishReason.CONTENT_FILTER),
    ("error", Status.FAILED, FinishReason.ERROR),  # OpenRouter
    ("eos", Status.COMPLETED, FinishReason.OTHER),
]


def test_every_finish_reason_has_a_case() -> None:
    assert {raw for raw, _, _ in FINISH_CASES} - {"eos"} == set(FINISH_REASONS)


@pytest.mark.parametrize(("raw", "status", "reason"), FINISH_CASES)
def test_finish_reason(raw: str, status: Status, reason: FinishReason) -> None:
    assert feed([FIRST, chunk({}, finish_reason=raw)]) == [
        Finish(seq=2, status=status, reason=reason, raw=raw)
    ]


@pytest.mark.parametrize(
    ("error", "type_", "retryable"),
    [
        ({"message": "m", "type": "server_error", "code": None}, "server_error", True),
        (
            {"message": "m", "type": "requests", "code": "rate_limit_exceeded"},
            "rate_limit_exceeded",
            True,
        ),
        (
            {"message": "m", "type": "invalid_request_error", "code": None},
            "invalid_request_error",
            False,
        ),
        (
            {"message": "m", "type": "insufficient_quota", "code": "insufficient_quota"},
            "insufficient_quota",
            False,
        ),
        ({"message": "m"}, "error", False),
    ],
)
def test_error_retryability(error: dict[str, Any], type_: str, retryable: bool) -> None:
    [event] = feed([{"error": error}])
    assert event == ErrorEvent(
        seq=1, type=type_, message="m", retryable=retryable, raw={"error": error}
    )


def test_error_as_a_bare_string() -> None:
    [event] = feed([{"error": "upstream timed out"}])
    assert event == ErrorEvent(
        seq=1,
        type="error",
        message="upstream timed out",
        retryable=False,
        raw={"error": "upstream timed out"},
    )


def test_tool_call_fragments_in_parallel() -> None:
    dialect = get_dialect("openai-chat")
    frames = [
        chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "f", "arguments": ""},
                    },
                    {
                        "index": 1,
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "g", "arguments": ""},
                    },
                ],
            }
        ),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"x":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": "1}"}}]}),
        chunk({}, finish_reason="tool_calls"),
    ]
    events = [
        e
        for seq, p in enumerate(frames, 1)
        for e in dialect.events(sse(p), dialect.load(sse(p)), seq)
    ]
    assert events == [
        START,
        ToolCallDelta(seq=1, index=0, id="call_a", name="f"),
        ToolCallDelta(seq=1, index=1, id="call_b", name="g"),
        ToolCallDelta(seq=2, index=1, arguments='{"x":'),
        ToolCallDelta(seq=3, index=0, arguments="{}"),
        ToolCallDelta(seq=4, index=1, arguments="1}"),
        Finish(seq=5, status=Status.COMPLETED, reason=FinishReason.TOOL_CALLS, raw="tool_calls"),
    ]


def test_other_choices_are_kept_out_of_the_text() -> None:
    other = chunk({"content": "second answer"}, index=1)
    assert feed([FIRST, other]) == [UnknownEvent(seq=2, type="choice", raw=other)]
    other_end = chunk({}, finish_reason="length", index=1)
    assert feed([FIRST, other_end]) == [UnknownEvent(seq=2, type="choice", raw=other_end)]


def test_usage_only_final_chunk() -> None:
    last = {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": "gpt-4o-mini",
        "choices": [],
        "usage": {
            "prompt_tokens": 9,
            "completion_tokens": 12,
            "total_tokens": 21,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
    }
    assert feed([FIRST, last]) == [
        Usage(
            seq=2,
            input_tokens=9,
            output_tokens=12,
            total_tokens=21,
            reasoning_tokens=2,
            cached_tokens=4,
        )
    ]


def test_usage_and_finish_in_one_chunk_put_the_finish_last() -> None:
    last = chunk({"content": "!"}, finish_reason="stop")
    last["usage"] = {"prompt_tokens": 10, "completion_tokens": 15, "total_tokens": 25}
    assert feed([FIRST, last]) == [
        TextDelta(seq=2, text="!"),
        Usage(seq=2, input_tokens=10, output_tokens=15, total_tokens=25),
        Finish(seq=2, status=Status.COMPLETED, reason=FinishReason.STOP, raw="stop"),
    ]


def test_empty_string_finish_reason_is_no_finish_reason() -> None:
    """Groq and others send ``"finish_reason": ""`` on every chunk before the last."""
    assert feed([FIRST, chunk({"content": " from"}, finish_reason="")]) == [
        TextDelta(seq=2, text=" from")
    ]


def test_null_usage_on_every_chunk_is_ignored() -> None:
    first = dict(FIRST, usage=None)
    assert feed([first]) == [START]


def test_undocumented_delta_field_is_passed_through() -> None:
    frame = chunk({"content": "a", "annotations": [{"type": "url_citation"}]})
    assert feed([FIRST, frame]) == [
        TextDelta(seq=2, text="a"),
        UnknownEvent(seq=2, type="delta/annotations", raw=frame),
    ]


def test_reasoning_that_is_not_text_is_passed_through() -> None:
    frame = chunk({"reasoning": {"summary": "x"}})
    assert feed([FIRST, frame]) == [UnknownEvent(seq=2, type="delta/reasoning", raw=frame)]


def test_a_payload_without_choices_usage_or_error() -> None:
    payload = {"object": "chat.completion.keepalive"}
    assert feed([payload]) == [UnknownEvent(seq=1, type="chat.completion.keepalive", raw=payload)]
    assert feed([{}]) == [UnknownEvent(seq=1, type="chunk", raw={})]


def test_malformed_json_is_a_payload_error() -> None:
    with pytest.raises(PayloadError, match="malformed JSON"):
        get_dialect("openai-chat").load(
            sse('{"id": "chatcmpl-123", "choices": [{"delta": {"content": "\\')
        )


def test_undocumented_shape_is_a_payload_error() -> None:
    dialect = get_dialect("openai-chat")
    frame = sse({"choices": ["text"]})
    with pytest.raises(PayloadError, match="unexpected payload shape"):
        dialect.events(frame, dialect.load(frame), 1)


def test_documented_chunks_and_detection() -> None:
    """The chunk objects of the API reference ("The chat completion chunk object")."""
    head = (
        '{"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,'
        '"model":"gpt-4o-mini", "system_fingerprint": "fp_44709d6fcb", '
    )
    lines = [
        head + '"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
        '"finish_reason":null}]}',
        head + '"choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,'
        '"finish_reason":null}]}',
        head + '"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}',
        "[DONE]",
    ]
    frames = [sse(line) for line in lines]
    assert [detect_dialect(frame) for frame in frames] == ["openai-chat"] * 4
    dialect = get_dialect("openai-chat")
    events = [e for seq, f in enumerate(frames, 1) for e in dialect.events(f, dialect.load(f), seq)]
    assert events == [
        START,
        TextDelta(seq=2, text="Hello"),
        Finish(seq=3, status=Status.COMPLETED, reason=FinishReason.STOP, raw="stop"),
        StreamEnd(seq=4, marker="[DONE]"),
    ]
    assert dialect.provider_seq(dialect.load(frames[0])) is None


def test_fragments_that_say_nothing_are_skipped() -> None:
    empty_call = chunk({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]})
    assert feed([FIRST, empty_call]) == [
        UnknownEvent(seq=2, type="chat.completion.chunk", raw=empty_call)
    ]
    empty_function = chunk({"function_call": {"arguments": ""}})
    assert feed([FIRST, empty_function]) == [
        UnknownEvent(seq=2, type="chat.completion.chunk", raw=empty_function)
    ]
