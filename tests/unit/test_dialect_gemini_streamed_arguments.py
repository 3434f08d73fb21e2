"""Vertex AI's streamed function-call arguments (partialArgs): the events, the JSON text, bad input.

Expected values are written from Vertex's reference (FunctionCall.willContinue: another part of
the call follows; PartialArg.jsonPath, an RFC 9535 path; stringValue/numberValue/boolValue/
nullValue; PartialArg.willContinue: another piece of the same path follows). The recorded bodies
are in tests/conformance/dialects/gemini/vertex_*.sse.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from unbroken import Status, parse
from unbroken.dialects import get_dialect
from unbroken.dialects.gemini_arguments import StreamedArguments, parse_path
from unbroken.errors import PayloadError
from unbroken.events import Event, ReasoningDelta, ToolCallDelta, UnknownEvent
from unbroken.finish import FinishReason
from unbroken.framing import ServerSentEvent


def call(**fields: Any) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": fields}]}}]}


def piece(path: str, **value: Any) -> dict[str, Any]:
    return {"jsonPath": path, **value}


def run(payloads: list[dict[str, Any]]) -> list[list[Event]]:
    """Each frame's events, from one dialect object (seq 1, 2, ...)."""
    dialect = get_dialect("gemini")
    out = []
    for seq, payload in enumerate(payloads, start=1):
        frame = ServerSentEvent(event="message", data=json.dumps(payload))
        out.append(dialect.events(frame, dialect.load(frame), seq))
    return out


def body(payloads: list[dict[str, Any]]) -> bytes:
    return b"".join(f"data: {json.dumps(p)}\n\n".encode() for p in payloads)


WEATHER = [
    call(name="get_weather", willContinue=True),
    call(partialArgs=[piece("$.location", stringValue="San ", willContinue=True)],
         willContinue=True),
    call(partialArgs=[piece("$.location", stringValue="Francisco", willContinue=True)],
         willContinue=True),
    call(partialArgs=[piece("$.location", stringValue=""), piece("$.days", numberValue=3)],
         willContinue=True),
    call(),
]


def test_a_streamed_call_is_named_at_once_and_its_arguments_come_as_json_text() -> None:
    assert run(WEATHER) == [
        [ToolCallDelta(seq=1, index=0, name="get_weather", arguments="")],
        [ToolCallDelta(seq=2, index=0, arguments='{"location":"San ')],
        [ToolCallDelta(seq=3, index=0, arguments="Francisco")],
        # the string's closing quote waits for the next path
        [ToolCallDelta(seq=4, index=0, arguments='","days":3')],
        [ToolCallDelta(seq=5, index=0, arguments="}")],
    ]


def test_through_parse_the_call_is_whole_and_stop_means_tool_calls() -> None:
    end = {"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]},
                           "finishReason": "STOP"}]}
    message = parse(body([*WEATHER, end]), dialect="gemini")
    assert message.status is Status.COMPLETED
    assert message.finish_reason is FinishReason.TOOL_CALLS
    [tool] = message.tool_calls
    assert (tool.name, tool.arguments, tool.value) == (
        "get_weather", '{"location":"San Francisco","days":3}',
        {"location": "San Francisco", "days": 3})
    assert message.warnings == []


def test_a_cut_inside_a_call_keeps_the_text_so_far_and_says_it_is_not_json() -> None:
    message = parse(body(WEATHER[:3]), dialect="gemini")
    assert message.status is Status.INTERRUPTED
    [tool] = message.tool_calls
    assert (tool.name, tool.arguments, tool.value) == (
        "get_weather", '{"location":"San Francisco', None)
    assert [w.code for w in message.warnings if w.code == "tool_arguments"] == ["tool_arguments"]


def test_a_duplicated_frame_does_not_write_its_piece_twice() -> None:
    numbered = [(n, p) for n, p in enumerate(WEATHER, start=1)]
    # frame 2 comes again after frame 3 (a body resumed from an earlier position)
    order = [numbered[0], numbered[1], numbered[2], numbered[1], *numbered[3:]]
    chunks = [f"id: {n}\ndata: {json.dumps(p)}\n\n".encode() for n, p in order]
    message = parse(chunks, dialect="gemini")
    [tool] = message.tool_calls
    assert tool.arguments == '{"location":"San Francisco","days":3}'
    assert message.duplicates == 1


def test_values_of_every_kind_nested_objects_and_arrays() -> None:
    arguments = StreamedArguments()
    text = "".join(arguments.add(p) for p in [
        piece("$.order.items[0].sku", stringValue="A-1"),
        piece("$.order.items[0].qty", numberValue=2),
        piece("$.order.items[1].sku", stringValue="B-\"2\""),
        piece("$.order.items[1].gift", boolValue=False),
        piece("$.order.note", nullValue="NULL_VALUE"),
        piece("$.order.rush", boolValue=True),
        piece("$['with space']", numberValue=0.25),
        piece("$.tags[0]", stringValue="x"),
        piece("$.tags[1]", stringValue="é"),
        piece("$.empty"),  # no value: nothing to write
    ]) + arguments.close()
    assert text == ('{"order":{"items":[{"sku":"A-1","qty":2},{"sku":"B-\\"2\\"","gift":false}],'
                    '"note":null,"rush":true},"with space":0.25,"tags":["x","é"]}')
    assert json.loads(text)["order"]["items"][1]["sku"] == 'B-"2"'


def test_a_call_without_arguments_is_an_empty_object() -> None:
    assert run([call(name="ping", willContinue=True), call()]) == [
        [ToolCallDelta(seq=1, index=0, name="ping", arguments="")],
        [ToolCallDelta(seq=2, index=0, arguments="{}")],
    ]


def parts_of(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": c} for c in calls]}, "finishReason": "STOP"}]}


def test_several_calls_without_arguments_in_one_response() -> None:
    whole = parts_of({"name": "a"}, {"name": "b"})
    streamed = parts_of({"name": "c", "willContinue": True}, {},
                        {"name": "d", "willContinue": True}, {})
    message = parse(body([whole, streamed]), dialect="gemini")
    assert [(c.index, c.name, c.arguments, c.value) for c in message.tool_calls] == [
        (0, "a", "{}", {}), (1, "b", "{}", {}), (2, "c", "{}", {}), (3, "d", "{}", {})]
    assert message.finish_reason is FinishReason.TOOL_CALLS


def test_a_part_for_another_function_ends_the_open_call() -> None:
    frames = run([
        call(name="a", willContinue=True,
             partialArgs=[piece("$.x", numberValue=1)], thoughtSignature=None),
        call(name="b", willContinue=True),
        call(partialArgs=[piece("$.y", stringValue="z")]),
    ])
    assert frames == [
        [ToolCallDelta(seq=1, index=0, name="a", arguments='{"x":1')],
        [ToolCallDelta(seq=2, index=0, arguments="}"),
         ToolCallDelta(seq=2, index=1, name="b", arguments="")],
        [ToolCallDelta(seq=3, index=1, arguments='{"y":"z"}')],
    ]


def test_the_call_id_routes_and_a_signature_is_kept() -> None:
    payload = {"candidates": [{"content": {"parts": [
        {"functionCall": {"id": "fc-1", "name": "f", "willContinue": True},
         "thoughtSignature": "c2ln"}]}}]}
    assert run([payload]) == [[
        ToolCallDelta(seq=1, index=0, id="fc-1", name="f", arguments=""),
        ReasoningDelta(seq=1, signature="c2ln"),
    ]]


def test_an_end_part_with_no_open_call_is_not_a_call() -> None:
    payload = call()
    assert run([payload]) == [[UnknownEvent(seq=1, type="response", raw=payload)]]
    message = parse(body([call(name="f"), call()]), dialect="gemini")
    assert [(c.name, c.arguments) for c in message.tool_calls] == [("f", "{}")]


def test_whole_args_on_a_streamed_part_are_members() -> None:
    frames = run([call(name="f", willContinue=True, args={"a": [1, 2]}),
                  call(partialArgs=[piece("$.b", stringValue="c")])])
    text = "".join(e.arguments for f in frames for e in f if isinstance(e, ToolCallDelta))
    assert text == '{"a":[1,2],"b":"c"}'


@pytest.mark.parametrize(
    ("pieces", "message"),
    [
        ([piece("$.a.x", numberValue=1), piece("$.b", numberValue=1),
          piece("$.a.y", numberValue=2)], r"\$\.a\.y goes back .*member 'a' is already written"),
        ([piece("$.a", numberValue=1), piece("$.a", numberValue=2)],
         "member 'a' is already written"),
        ([piece("$.a", stringValue="x"), piece("$.b", numberValue=1),
          piece("$.a", stringValue="y")], "member 'a' is already written"),
        ([piece("$.list[1]", numberValue=1)], r"expected element \[0\]"),
        ([piece("$.list[0]", numberValue=1), piece("$.list[0]", numberValue=2)],
         r"expected element \[1\]"),
        ([piece("$.a[0]", numberValue=1), piece("$.a.b", numberValue=1)],
         r"expected element \[1\]"),
    ],
)
def test_a_path_back_into_written_arguments_is_refused(
    pieces: list[dict[str, Any]], message: str
) -> None:
    arguments = StreamedArguments()
    with pytest.raises(PayloadError, match=message):
        for p in pieces:
            arguments.add(p)


@pytest.mark.parametrize(
    ("partial", "message"),
    [
        ("$.a", "item is not an object"),
        ({"jsonPath": "a", "numberValue": 1}, "is not a JSON path"),
        ({"jsonPath": 5, "numberValue": 1}, "is not a JSON path"),
        ({"jsonPath": "$", "numberValue": 1}, "names no member"),
        ({"jsonPath": "$[0]", "numberValue": 1}, "names no member"),
        ({"jsonPath": "$.a[*]", "numberValue": 1}, "at character 3"),
        ({"jsonPath": "$..a", "numberValue": 1}, "at character 1"),
        ({"jsonPath": "$.a", "stringValue": 5}, "stringValue is not a string"),
        ({"jsonPath": "$.a", "numberValue": "5"}, "numberValue is not a number"),
        ({"jsonPath": "$.a", "numberValue": True}, "numberValue is not a number"),
        ({"jsonPath": "$.a", "numberValue": float("nan")}, "numberValue is not a number"),
        ({"jsonPath": "$.a", "boolValue": "true"}, "boolValue is not a boolean"),
    ],
)
def test_bad_pieces_are_payload_errors(partial: Any, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        StreamedArguments().add(partial)


def test_a_bad_piece_fails_the_stream_and_keeps_what_came_before() -> None:
    bad = call(partialArgs=[piece("$.location", numberValue="near")], willContinue=True)
    message = parse(body([WEATHER[0], WEATHER[1], bad]), dialect="gemini")
    assert message.status is Status.FAILED
    assert isinstance(message.error, PayloadError)
    assert "numberValue is not a number" in str(message.error)
    [tool] = message.tool_calls
    assert (tool.name, tool.arguments) == ("get_weather", '{"location":"San ')


@pytest.mark.parametrize(
    ("path", "segments"),
    [
        ("$.a", ("a",)),
        ("$.recipe.ingredients[10].name", ("recipe", "ingredients", 10, "name")),
        ("$['on']", ("on",)),
        ('$["a.b"][0]', ("a.b", 0)),
        ("$['it\\'s']", ("it's",)),
        ("$['\\u00e9\\n']", ("é\n",)),
        ("$.été", ("été",)),
    ],
)
def test_json_paths(path: str, segments: tuple[Any, ...]) -> None:
    assert parse_path(path) == segments
