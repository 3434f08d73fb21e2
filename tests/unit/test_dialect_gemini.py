"""Gemini streamGenerateContent?alt=sse: every frame field, part kind and finish reason."""

from __future__ import annotations

import json
from typing import Any

import pytest

from unbroken.dialects import detect_dialect, get_dialect
from unbroken.dialects.gemini import EVENT_TYPES, FINISH_REASONS
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

FILTERED = (Status.FILTERED, FinishReason.CONTENT_FILTER)


def sse(payload: dict[str, Any] | str) -> ServerSentEvent:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return ServerSentEvent(event="message", data=data)


def feed(payloads: list[dict[str, Any]]) -> list[Event]:
    """Run a fresh dialect over the payloads (seq 1, 2, ...); the last frame's events."""
    dialect = get_dialect("gemini")
    out: list[Event] = []
    for seq, payload in enumerate(payloads, start=1):
        frame = sse(payload)
        out = dialect.events(frame, dialect.load(frame), seq)
    return out


def parts(*items: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": list(items), "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate]}


def passed(seq: int, kind: str, payload: dict[str, Any]) -> list[Event]:
    return [UnknownEvent(seq=seq, type=kind, raw=payload)]


BLOB = {"mimeType": "image/png", "data": "iVBORw0KGgo="}
CASES: dict[str, tuple[dict[str, Any], list[Event]]] = {
    "candidates": (
        {
            "candidates": [{"content": {"parts": [{"text": "Hi"}], "role": "model"}, "index": 0}],
            "modelVersion": "gemini-2.5-flash",
            "responseId": "LdGKaIu3NoKsmtkP0M27iQ8",
        },
        [
            MessageStart(seq=1, id="LdGKaIu3NoKsmtkP0M27iQ8", model="gemini-2.5-flash"),
            TextDelta(seq=1, text="Hi"),
        ],
    ),
    "usageMetadata": (
        {
            "usageMetadata": {
                "promptTokenCount": 2,
                "candidatesTokenCount": 8,
                "totalTokenCount": 169,
                "thoughtsTokenCount": 159,
                "cachedContentTokenCount": 1,
            }
        },
        [
            Usage(
                seq=1,
                input_tokens=2,
                output_tokens=8,
                total_tokens=169,
                reasoning_tokens=159,
                cached_tokens=1,
            )
        ],
    ),
    "promptFeedback": (
        {
            "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []},
            "usageMetadata": {"promptTokenCount": 40, "totalTokenCount": 40},
        },
        [
            Usage(seq=1, input_tokens=40, total_tokens=40),
            Finish(
                seq=1,
                status=Status.FILTERED,
                reason=FinishReason.CONTENT_FILTER,
                raw="SAFETY",
                final=False,
            ),
        ],
    ),
    "error": (
        {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}},
        [
            ErrorEvent(
                seq=1,
                type="UNAVAILABLE",
                message="The model is overloaded.",
                retryable=True,
                raw={
                    "error": {
                        "code": 503,
                        "message": "The model is overloaded.",
                        "status": "UNAVAILABLE",
                    }
                },
            )
        ],
    ),
    "part/text": (parts({"text": "Hello"}), [TextDelta(seq=1, text="Hello")]),
    "part/functionCall": (
        parts({"functionCall": {"name": "get_weather", "args": {"location": "Boston, MA"}}}),
        [ToolCallDelta(seq=1, index=0, name="get_weather", arguments='{"location":"Boston, MA"}')],
    ),
    "part/thoughtSignature": (
        parts({"thoughtSignature": "CiQB0e2Kb7"}),
        [ReasoningDelta(seq=1, text="", signature="CiQB0e2Kb7")],
    ),
    "part/functionResponse": (
        parts({"functionResponse": {"name": "f", "response": {"ok": True}}}),
        passed(
            1,
            "part/functionResponse",
            parts({"functionResponse": {"name": "f", "response": {"ok": True}}}),
        ),
    ),
    "part/inlineData": (
        parts({"inlineData": BLOB}),
        passed(1, "part/inlineData", parts({"inlineData": BLOB})),
    ),
    "part/fileData": (
        parts({"fileData": {"mimeType": "video/mp4", "fileUri": "gs://b/v.mp4"}}),
        passed(
            1,
            "part/fileData",
            parts({"fileData": {"mimeType": "video/mp4", "fileUri": "gs://b/v.mp4"}}),
        ),
    ),
    "part/executableCode": (
        parts({"executableCode": {"language": "PYTHON", "code": "print(1)"}}),
        passed(
            1,
            "part/executableCode",
            parts({"executableCode": {"language": "PYTHON", "code": "print(1)"}}),
        ),
    ),
    "part/codeExecutionResult": (
        parts({"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1\n"}}),
        passed(
            1,
            "part/codeExecutionResult",
            parts({"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1\n"}}),
        ),
    ),
    "part/toolCall": (
        parts({"toolCall": {"id": "t1", "toolType": "GOOGLE_SEARCH", "args": {}}}),
        passed(
            1,
            "part/toolCall",
            parts({"toolCall": {"id": "t1", "toolType": "GOOGLE_SEARCH", "args": {}}}),
        ),
    ),
    "part/toolResponse": (
        parts({"toolResponse": {"id": "t1", "response": {}}}),
        passed(1, "part/toolResponse", parts({"toolResponse": {"id": "t1", "response": {}}})),
    ),
    "part/videoMetadata": (
        parts({"videoMetadata": {"startOffset": "0s"}}),
        passed(1, "part/videoMetadata", parts({"videoMetadata": {"startOffset": "0s"}})),
    ),
}


def test_every_table_entry_has_a_case() -> None:
    assert sorted(CASES) == sorted(EVENT_TYPES)


@pytest.mark.parametrize("key", sorted(CASES))
def test_table_entry(key: str) -> None:
    frame, expected = CASES[key]
    assert feed([frame]) == expected


FINISH_CASES = [
    ("STOP", Status.COMPLETED, FinishReason.STOP),
    ("MAX_TOKENS", Status.TRUNCATED, FinishReason.LENGTH),
    ("SAFETY", *FILTERED),
    ("RECITATION", *FILTERED),
    ("BLOCKLIST", *FILTERED),
    ("PROHIBITED_CONTENT", *FILTERED),
    ("SPII", *FILTERED),
    ("IMAGE_SAFETY", *FILTERED),
    ("IMAGE_PROHIBITED_CONTENT", *FILTERED),
    ("IMAGE_RECITATION", *FILTERED),
    ("MALFORMED_FUNCTION_CALL", Status.FAILED, FinishReason.ERROR),
    ("UNEXPECTED_TOOL_CALL", Status.FAILED, FinishReason.ERROR),
    ("TOO_MANY_TOOL_CALLS", Status.FAILED, FinishReason.ERROR),
    ("FINISH_REASON_UNSPECIFIED", Status.COMPLETED, FinishReason.OTHER),
    ("OTHER", Status.COMPLETED, FinishReason.OTHER),
    ("LANGUAGE", Status.COMPLETED, FinishReason.OTHER),
    ("NO_IMAGE", Status.COMPLETED, FinishReason.OTHER),
    ("IMAGE_OTHER", Status.COMPLETED, FinishReason.OTHER),
    # newer than design.md's table: "anything else" there, so completed / other
    ("MISSING_THOUGHT_SIGNATURE", Status.COMPLETED, FinishReason.OTHER),
    ("MALFORMED_RESPONSE", Status.COMPLETED, FinishReason.OTHER),
    ("ESCALATION", Status.COMPLETED, FinishReason.OTHER),
    ("PUP_LIMITED_DISABLED", Status.COMPLETED, FinishReason.OTHER),
    ("CONTINUATION", Status.COMPLETED, FinishReason.OTHER),
    ("MODEL_ARMOR", Status.COMPLETED, FinishReason.OTHER),
    ("A_REASON_FROM_2030", Status.COMPLETED, FinishReason.OTHER),
]


def test_every_finish_reason_has_a_case() -> None:
    assert {raw for raw, _, _ in FINISH_CASES} - {"A_REASON_FROM_2030"} == set(FINISH_REASONS)


def test_table_covers_the_sdk_finish_reasons() -> None:
    from google.genai.types import FinishReason as SDKFinishReason

    assert {member.value for member in SDKFinishReason} == set(FINISH_REASONS)


@pytest.mark.parametrize(("raw", "status", "reason"), FINISH_CASES)
def test_finish_reason(raw: str, status: Status, reason: FinishReason) -> None:
    assert feed([parts({"text": "x"}, finish=raw)]) == [
        TextDelta(seq=1, text="x"),
        Finish(seq=1, status=status, reason=reason, raw=raw, final=False),
    ]


def test_stop_after_a_function_call_is_tool_calls() -> None:
    call = parts({"functionCall": {"name": "f", "args": {}}})
    end = {"candidates": [{"content": {"role": "model"}, "finishReason": "STOP", "index": 0}]}
    assert feed([call, end]) == [
        Finish(
            seq=2, status=Status.COMPLETED, reason=FinishReason.TOOL_CALLS, raw="STOP", final=False
        )
    ]
    assert feed([parts({"functionCall": {"name": "f"}}, finish="STOP")]) == [
        ToolCallDelta(seq=1, index=0, name="f", arguments="{}"),
        Finish(
            seq=1, status=Status.COMPLETED, reason=FinishReason.TOOL_CALLS, raw="STOP", final=False
        ),
    ]


def test_max_tokens_after_a_function_call_stays_length() -> None:
    call = parts({"functionCall": {"name": "f", "args": {}}})
    assert feed([call, parts(finish="MAX_TOKENS")]) == [
        Finish(
            seq=2,
            status=Status.TRUNCATED,
            reason=FinishReason.LENGTH,
            raw="MAX_TOKENS",
            final=False,
        )
    ]


@pytest.mark.parametrize(
    "block_reason",
    [
        "BLOCKED_REASON_UNSPECIFIED",
        "SAFETY",
        "OTHER",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "IMAGE_SAFETY",
        "MODEL_ARMOR",
        "JAILBREAK",
    ],
)
def test_every_block_reason_is_filtered(block_reason: str) -> None:
    payload = {"promptFeedback": {"blockReason": block_reason}}
    assert feed([payload]) == [
        Finish(
            seq=1,
            status=Status.FILTERED,
            reason=FinishReason.CONTENT_FILTER,
            raw=block_reason,
            final=False,
        )
    ]


def test_prompt_feedback_without_block_reason_is_passed_through() -> None:
    payload: dict[str, Any] = {"promptFeedback": {"safetyRatings": []}}
    assert feed([payload]) == passed(1, "response", payload)


@pytest.mark.parametrize(
    ("code", "status", "retryable"),
    [
        (429, "RESOURCE_EXHAUSTED", True),
        (500, "INTERNAL", True),
        (503, "UNAVAILABLE", True),
        (504, "DEADLINE_EXCEEDED", True),
        (400, "INVALID_ARGUMENT", False),
        (403, "PERMISSION_DENIED", False),
        (404, "NOT_FOUND", False),
    ],
)
def test_error_retryability(code: int, status: str, retryable: bool) -> None:
    payload = {"error": {"code": code, "message": "m", "status": status}}
    assert feed([payload]) == [
        ErrorEvent(seq=1, type=status, message="m", retryable=retryable, raw=payload)
    ]


def test_error_without_status_is_named_by_its_code() -> None:
    payload = {"error": {"code": 502, "message": "bad gateway"}}
    assert feed([payload]) == [
        ErrorEvent(seq=1, type="502", message="bad gateway", retryable=True, raw=payload)
    ]


def test_function_calls_are_numbered_across_chunks() -> None:
    dialect = get_dialect("gemini")
    first = sse(parts({"functionCall": {"id": "a", "name": "f", "args": {"x": 1}}}))
    second = sse(
        parts(
            {"functionCall": {"name": "g", "args": {"y": [1, 2]}}},
            {"functionCall": {"name": "h", "args": {}}},
        )
    )
    assert dialect.events(first, dialect.load(first), 1) == [
        ToolCallDelta(seq=1, index=0, id="a", name="f", arguments='{"x":1}')
    ]
    # a replay of the first frame is parsed again but does not take an index
    assert dialect.events(first, dialect.load(first), 1) == [
        ToolCallDelta(seq=1, index=0, id="a", name="f", arguments='{"x":1}')
    ]
    assert dialect.events(second, dialect.load(second), 2) == [
        ToolCallDelta(seq=2, index=1, name="g", arguments='{"y":[1,2]}'),
        ToolCallDelta(seq=2, index=2, name="h", arguments="{}"),
    ]


def test_thought_parts_are_reasoning() -> None:
    payload = parts(
        {"text": "**Planning**", "thought": True},
        {"text": "Answer", "thoughtSignature": "c2ln"},
    )
    assert feed([payload]) == [
        ReasoningDelta(seq=1, text="**Planning**"),
        TextDelta(seq=1, text="Answer"),
        ReasoningDelta(seq=1, text="", signature="c2ln"),
    ]


def test_function_call_with_signature() -> None:
    payload = parts({"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "c2ln"})
    assert feed([payload]) == [
        ToolCallDelta(seq=1, index=0, name="f", arguments="{}"),
        ReasoningDelta(seq=1, text="", signature="c2ln"),
    ]


def test_streamed_function_call_arguments_end_as_tool_calls() -> None:
    """Vertex AI's streamFunctionCallArguments (test_dialect_gemini_streamed_arguments.py has
    the rest): the calls count, so STOP after them is tool_calls."""
    head = parts({"functionCall": {"name": "get_weather", "willContinue": True}})
    middle = parts(
        {
            "functionCall": {
                "partialArgs": [{"jsonPath": "$.location", "stringValue": "Bos"}],
                "willContinue": True,
            }
        }
    )
    end = parts({"functionCall": {}}, finish="STOP")
    assert feed([head]) == [ToolCallDelta(seq=1, index=0, name="get_weather", arguments="")]
    assert feed([head, middle]) == [ToolCallDelta(seq=2, index=0, arguments='{"location":"Bos')]
    assert feed([head, middle, end]) == [
        ToolCallDelta(seq=3, index=0, arguments='"}'),
        Finish(seq=3, status=Status.COMPLETED, reason=FinishReason.TOOL_CALLS, raw="STOP",
               final=False),
    ]


def test_other_candidates_are_kept_out_of_the_text() -> None:
    payload = {
        "candidates": [{"content": {"parts": [{"text": "B"}]}, "index": 1, "finishReason": "STOP"}]
    }
    assert feed([payload]) == passed(1, "candidate", payload)


def test_undocumented_part_is_passed_through() -> None:
    payload = parts({"hologram": {"x": 1}})
    assert feed([payload]) == passed(1, "part/hologram", payload)


def test_final_chunk_with_finish_reason_and_no_parts() -> None:
    payload = {
        "candidates": [{"content": {"role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7},
        "modelVersion": "gemini-2.5-flash",
    }
    assert feed([payload]) == [
        MessageStart(seq=1, model="gemini-2.5-flash"),
        Usage(seq=1, input_tokens=5, output_tokens=2, total_tokens=7),
        Finish(seq=1, status=Status.COMPLETED, reason=FinishReason.STOP, raw="STOP", final=False),
    ]


def test_a_json_array_says_alt_sse_is_missing() -> None:
    with pytest.raises(PayloadError, match=r"alt=sse"):
        get_dialect("gemini").load(sse('[{"candidates": []}]'))


def test_malformed_json_is_a_payload_error() -> None:
    with pytest.raises(PayloadError, match="malformed JSON"):
        get_dialect("gemini").load(sse('{"candidates": [{"content": {"parts": [{"text": "\xe4'))


def test_done_from_a_relay_is_an_end_marker() -> None:
    dialect = get_dialect("gemini")
    frame = sse("[DONE]")
    assert dialect.events(frame, dialect.load(frame), 3) == [StreamEnd(seq=3, marker="[DONE]")]


def test_detection() -> None:
    assert detect_dialect(sse(CASES["candidates"][0])) == "gemini"
    assert detect_dialect(sse(CASES["promptFeedback"][0])) == "gemini"
    assert detect_dialect(sse(CASES["error"][0])) == "gemini"
    assert get_dialect("gemini").provider_seq({"candidates": []}) is None


def test_json_scalar_is_a_payload_error() -> None:
    with pytest.raises(PayloadError, match="event data is JSON int, expected an object"):
        get_dialect("gemini").load(sse("5"))


@pytest.mark.parametrize(
    "payload",
    [
        {"usageMetadata": None},
        parts({"text": "", "thought": True}),
        parts({"thoughtSignature": ""}),
        parts({"text": ""}),
        {"candidates": [{"content": None, "index": 0}]},
    ],
    ids=["null-usage", "empty-thought", "empty-signature", "empty-text", "no-content"],
)
def test_chunks_that_say_nothing_are_passed_through(payload: dict[str, Any]) -> None:
    assert feed([payload]) == passed(1, "response", payload)


def test_error_as_a_bare_string() -> None:
    payload = {"error": "quota exceeded"}
    assert feed([payload]) == [
        ErrorEvent(seq=1, type="error", message="quota exceeded", retryable=False, raw=payload)
    ]
