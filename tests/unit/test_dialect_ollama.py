"""Ollama /api/chat and /api/generate NDJSON: every line field, message field and done reason."""

from __future__ import annotations

from typing import Any

import pytest

from unbroken.dialects import detect_dialect, get_dialect
from unbroken.dialects.ollama import EVENT_TYPES, FINISH_REASONS
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
from unbroken.framing import JSONLine, NDJSONDecoder


def line(value: Any, number: int = 1) -> JSONLine:
    return JSONLine(value=value, line=number, nbytes=0, raw=b"")


def feed(payloads: list[dict[str, Any]]) -> list[Event]:
    """Run a fresh dialect over the lines (seq 1, 2, ...); the last line's events."""
    dialect = get_dialect("ollama")
    out: list[Event] = []
    for seq, payload in enumerate(payloads, start=1):
        frame = line(payload, seq)
        out = dialect.events(frame, dialect.load(frame), seq)
    return out


def chat(**message: Any) -> dict[str, Any]:
    return {
        "model": "llama3.2",
        "created_at": "2023-08-04T08:52:19.385406455-07:00",
        "message": {"role": "assistant", **message},
        "done": False,
    }


def done(reason: str | None, **fields: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "model": "llama3.2",
        "created_at": "2023-08-04T19:22:45.499127Z",
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "total_duration": 4883583458,
        "prompt_eval_count": 26,
        "eval_count": 282,
        **fields,
    }
    if reason is not None:
        value["done_reason"] = reason
    return value


FIRST = chat(content="")
START = MessageStart(seq=1, model="llama3.2")
USAGE2 = Usage(seq=2, input_tokens=26, output_tokens=282)
CALL = {
    "function": {
        "name": "get_current_weather",
        "arguments": {"format": "celsius", "location": "Paris, FR"},
    }
}

CASES: dict[str, tuple[list[dict[str, Any]], dict[str, Any], list[Event]]] = {
    "error": (
        [],
        {"error": "an error was encountered while running the model"},
        [
            ErrorEvent(
                seq=1,
                type="error",
                message="an error was encountered while running the model",
                retryable=False,
                raw={"error": "an error was encountered while running the model"},
            )
        ],
    ),
    "message": ([], chat(content="The"), [START, TextDelta(seq=1, text="The")]),
    "thinking": (
        [],
        {
            "model": "gpt-oss:20b",
            "created_at": "2025-08-15T22:55:08Z",
            "response": "",
            "thinking": "Need",
            "done": False,
        },
        [MessageStart(seq=1, model="gpt-oss:20b"), ReasoningDelta(seq=1, text="Need")],
    ),
    "response": (
        [],
        {
            "model": "gemma3",
            "created_at": "2025-10-26T17:15:24.097767Z",
            "response": "That",
            "done": False,
        },
        [MessageStart(seq=1, model="gemma3"), TextDelta(seq=1, text="That")],
    ),
    "image": (
        [],
        {
            "model": "flux",
            "created_at": "2026-01-01T00:00:00Z",
            "image": "iVBORw0KGgo=",
            "done": False,
            "completed": 1,
            "total": 4,
        },
        [
            MessageStart(seq=1, model="flux"),
            UnknownEvent(
                seq=1,
                type="line",
                raw={
                    "model": "flux",
                    "created_at": "2026-01-01T00:00:00Z",
                    "image": "iVBORw0KGgo=",
                    "done": False,
                    "completed": 1,
                    "total": 4,
                },
            ),
        ],
    ),
    "done": (
        [FIRST],
        done("stop"),
        [
            USAGE2,
            Finish(seq=2, status=Status.COMPLETED, reason=FinishReason.STOP, raw="stop"),
            StreamEnd(seq=2, marker="done"),
        ],
    ),
    "message/content": ([FIRST], chat(content=" sky"), [TextDelta(seq=2, text=" sky")]),
    "message/thinking": (
        [FIRST],
        chat(content="", thinking="Hmm"),
        [ReasoningDelta(seq=2, text="Hmm")],
    ),
    "message/tool_calls": (
        [FIRST],
        chat(content="", tool_calls=[CALL]),
        [
            ToolCallDelta(
                seq=2,
                index=0,
                name="get_current_weather",
                arguments='{"format":"celsius","location":"Paris, FR"}',
            )
        ],
    ),
    "message/role": ([FIRST], chat(), [UnknownEvent(seq=2, type="line", raw=chat())]),
    "message/images": (
        [FIRST],
        chat(content="", images=["aGk="]),
        [UnknownEvent(seq=2, type="message/images", raw=chat(content="", images=["aGk="]))],
    ),
    "message/tool_name": (
        [FIRST],
        chat(content="", tool_name="get_temperature"),
        [
            UnknownEvent(
                seq=2, type="message/tool_name", raw=chat(content="", tool_name="get_temperature")
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


DONE_CASES = [
    ("stop", Status.COMPLETED, FinishReason.STOP),
    ("length", Status.TRUNCATED, FinishReason.LENGTH),
    ("load", Status.COMPLETED, FinishReason.OTHER),
    ("unload", Status.COMPLETED, FinishReason.OTHER),
    ("a_reason_from_2030", Status.COMPLETED, FinishReason.OTHER),
]


def test_every_done_reason_has_a_case() -> None:
    assert {raw for raw, _, _ in DONE_CASES} - {"a_reason_from_2030"} == set(FINISH_REASONS)


@pytest.mark.parametrize(("raw", "status", "reason"), DONE_CASES)
def test_done_reason(raw: str, status: Status, reason: FinishReason) -> None:
    assert feed([FIRST, done(raw)]) == [
        USAGE2,
        Finish(seq=2, status=status, reason=reason, raw=raw),
        StreamEnd(seq=2, marker="done"),
    ]


@pytest.mark.parametrize("reason", [None, ""], ids=["missing", "empty"])
def test_done_without_a_reason_is_no_finish(reason: str | None) -> None:
    """Ollama omits done_reason when the runner lost its connection: no verdict at all."""
    assert feed([FIRST, done(reason)]) == [USAGE2, StreamEnd(seq=2, marker="done")]


def test_stop_after_tool_calls_is_tool_calls() -> None:
    assert feed([FIRST, chat(content="", tool_calls=[CALL]), done("stop")]) == [
        Usage(seq=3, input_tokens=26, output_tokens=282),
        Finish(seq=3, status=Status.COMPLETED, reason=FinishReason.TOOL_CALLS, raw="stop"),
        StreamEnd(seq=3, marker="done"),
    ]


def test_tool_calls_on_the_done_line() -> None:
    last = done("stop")
    last["message"]["tool_calls"] = [CALL]
    events = feed([last])
    assert [type(e).__name__ for e in events] == [
        "MessageStart",
        "ToolCallDelta",
        "Usage",
        "Finish",
        "StreamEnd",
    ]
    assert events[3] == Finish(
        seq=1, status=Status.COMPLETED, reason=FinishReason.TOOL_CALLS, raw="stop"
    )


def test_tool_calls_are_numbered_across_lines_and_replays() -> None:
    dialect = get_dialect("ollama")
    first = line(
        chat(tool_calls=[{"id": "call_1", "function": {"index": 0, "name": "f", "arguments": {}}}])
    )
    second = line(chat(tool_calls=[{"function": {"name": "g", "arguments": '{"raw": true}'}}]))
    assert dialect.events(first, dialect.load(first), 1) == [
        MessageStart(seq=1, model="llama3.2"),
        ToolCallDelta(seq=1, index=0, id="call_1", name="f", arguments="{}"),
    ]
    assert dialect.events(first, dialect.load(first), 1) == [
        ToolCallDelta(seq=1, index=0, id="call_1", name="f", arguments="{}")
    ]
    assert dialect.events(second, dialect.load(second), 2) == [
        ToolCallDelta(seq=2, index=1, name="g", arguments='{"raw": true}')
    ]


def test_done_line_text_comes_before_the_end() -> None:
    """The generate streaming example: the last line carries text and the reason together."""
    last = {
        "model": "gemma3",
        "created_at": "2025-10-26T17:15:24.166576Z",
        "response": "!",
        "done": True,
        "done_reason": "stop",
    }
    assert feed([last]) == [
        MessageStart(seq=1, model="gemma3"),
        TextDelta(seq=1, text="!"),
        Finish(seq=1, status=Status.COMPLETED, reason=FinishReason.STOP, raw="stop"),
        StreamEnd(seq=1, marker="done"),
    ]


def test_error_object_is_kept_as_json_text() -> None:
    payload = {"error": {"message": "boom"}}
    assert feed([payload]) == [
        ErrorEvent(seq=1, type="error", message='{"message":"boom"}', retryable=False, raw=payload)
    ]


def test_a_line_that_is_not_an_object_is_a_payload_error() -> None:
    with pytest.raises(PayloadError, match="expected an object"):
        get_dialect("ollama").load(line([1, 2]))


def test_undocumented_shape_is_a_payload_error() -> None:
    dialect = get_dialect("ollama")
    frame = line({"message": "text"})
    with pytest.raises(PayloadError, match="unexpected payload shape"):
        dialect.events(frame, dialect.load(frame), 1)


def test_dialect_metadata_and_detection() -> None:
    dialect = get_dialect("ollama")
    assert (dialect.name, dialect.framing.name, dialect.media_type) == (
        "ollama",
        "ndjson",
        "application/x-ndjson",
    )
    assert dialect.provider_seq({"done": False}) is None
    decoder = NDJSONDecoder()
    [frame] = decoder.receive_data(b'{"model":"gemma3","response":"That","done":false}\n')
    assert detect_dialect(frame) == "ollama"


def test_done_that_is_not_true_is_not_the_end() -> None:
    payload = {"model": "llama3.2", "done": 1}
    assert feed([FIRST, payload]) == [UnknownEvent(seq=2, type="line", raw=payload)]
