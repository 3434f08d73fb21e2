"""StreamReceiver: seq sources, dialect detection, decoder errors, frames, reconnects."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.unit.test_parse_bodies import (
    DONE,
    anthropic_body,
    chat,
    chat_body,
    chunkings,
    gemini_body,
    ollama_body,
    responses_body,
    sse,
)

from unbroken._receiver import Frame, StreamReceiver, parse
from unbroken.errors import (
    DecodingError,
    EventTooLargeError,
    LocalProtocolError,
    PayloadError,
    TransportError,
)
from unbroken.events import Ping, StreamEnd, TextDelta, Usage
from unbroken.finish import FinishReason, Status
from unbroken.message import Message


def codes(message: Message) -> list[str]:
    return [warning.code for warning in message.warnings]


# -- every dialect, named and detected -------------------------------------------------------------

DIALECT_BODIES = [
    ("openai-chat", chat_body("Hel", "lo"), "Hello", "stop", 4, "position"),
    ("openai-responses", responses_body(["Hel", "lo"]), "Hello", "completed", 3, "provider"),
    ("anthropic", anthropic_body(["Hel", "lo"]), "Hello", "end_turn", 8, "position"),
    ("gemini", gemini_body(["Hel", "lo"]), "Hello", "STOP", 3, "position"),
    ("ollama", ollama_body(["Hel", "lo"]), "Hello", "stop", 3, "position"),
]


@pytest.mark.parametrize(("name", "body", "text", "raw", "last_seq", "source"), DIALECT_BODIES)
@pytest.mark.parametrize("requested", ["named", "auto"])
def test_each_dialect_completes_whatever_the_chunking(
    name: str, body: bytes, text: str, raw: str, last_seq: int, source: str, requested: str
) -> None:
    dialect = name if requested == "named" else "auto"
    for chunks in chunkings(body):
        message = parse(chunks, dialect=dialect)
        assert (message.status, message.finish_reason, message.raw_finish_reason) == (
            Status.COMPLETED,
            FinishReason.STOP,
            raw,
        )
        assert (message.text, message.last_seq, message.seq_source) == (text, last_seq, source)
        assert message.warnings == []  # Gemini and Responses have no end marker to miss


def test_leading_whitespace_before_an_ndjson_body_is_sniffed_across_reads() -> None:
    body = ollama_body(["a"])
    receiver = StreamReceiver("auto")
    assert receiver.receive_data(b"\n  ") == []
    assert receiver.receive_data(b"\r\n") == []
    frames = receiver.receive_data(body)
    assert receiver.dialect is not None and receiver.dialect.name == "ollama"
    assert [frame.seq for frame in frames] == [1, 2]
    receiver.receive_eof()
    assert (receiver.message.status, receiver.message.text) == (Status.COMPLETED, "a")


@pytest.mark.parametrize("body", [b"", b" \n\r\n"])
def test_an_empty_body_is_interrupted(body: bytes) -> None:
    message = parse([body], dialect="auto")
    assert (message.status, message.last_seq) == (Status.INTERRUPTED, -1)
    assert codes(message) == ["no_finish_reason"]


@pytest.mark.parametrize("dialect", ["gemini", "auto"])
def test_a_gemini_json_array_body_is_a_clear_payload_error(dialect: str) -> None:
    body = b'  [{"candidates": [{"content": {"parts": [{"text": "Hi"}]}}]}]'
    for chunks in chunkings(body):
        message = parse(chunks, dialect=dialect)
        assert message.status is Status.FAILED
        assert isinstance(message.error, PayloadError)
        assert "alt=sse" in str(message.error)
        assert (message.error.line, message.error.offset) == (1, 2)
        assert message.text == ""


def test_auto_fails_clearly_when_the_first_frame_matches_no_dialect() -> None:
    message = parse([sse({"hello": "world"}) + sse(chat("x"))], dialect="auto")
    assert message.status is Status.FAILED
    assert isinstance(message.error, PayloadError)
    assert str(message.error) == "dialect 'auto': the first frame matches no known dialect"
    assert (message.error.line, message.error.offset) == (1, 0)
    assert [frame.outcome for frame in message.trace.frames] == ["error"]


def test_an_unknown_dialect_name_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown dialect"):
        StreamReceiver("openai")


# -- seq sources ---------------------------------------------------------------------------------


def test_proxy_ids_set_the_stream_id_and_number_the_frames() -> None:
    body = sse(chat("a"), id="str_9:7") + sse(chat("b"), id="str_9:8") + sse(chat(finish="stop"))
    receiver = StreamReceiver("openai-chat")
    frames = receiver.receive_data(body)
    assert (receiver.seq_source, receiver.stream_id) == ("proxy", "str_9")
    assert [frame.seq for frame in frames] == [7, 8, 9]  # an id-less frame follows the last
    assert [frame.block_id for frame in frames] == ["str_9:7", "str_9:8", None]


def test_a_gap_in_proxy_seqs_is_recorded_as_possible_loss() -> None:
    body = sse(chat("a"), id="s:1") + sse(chat("c"), id="s:3") + sse(chat(finish="stop"), id="s:4")
    message = parse([body + sse("[DONE]", id="s:5")], dialect="openai-chat")
    assert message.gaps == [(1, 3)]
    assert (message.status, message.text) == (Status.COMPLETED, "ac")
    assert codes(message) == ["gap"]


def test_numeric_block_ids_are_the_seq_without_gap_warnings() -> None:
    body = sse(chat("a"), id="10") + sse(chat("b"), id="20") + sse(chat("b"), id="20")
    body += sse(chat(finish="stop"), id="x") + DONE
    message = parse([body], dialect="openai-chat")
    assert message.seq_source == "block_id"
    assert [frame.seq for frame in message.trace.frames] == [10, 20, 20, 21, 22]
    assert (message.text, message.duplicates, message.gaps) == ("ab", 1, [])


@pytest.mark.parametrize(
    "ident", ["\u00b2", "1" * 4301, str(2**63)], ids=["superscript", "4301", "2**63"]
)
def test_a_block_id_that_is_no_seq_does_not_number_the_frames(ident: str) -> None:
    # "²" is a digit to str.isdigit() but not to int(); 4,301 digits are past int()'s limit; a
    # seq is at most 2**63 - 1. None of them may raise: the frames are numbered by position.
    body = sse(chat("a"), id=ident) + sse(chat(finish="stop")) + DONE
    message = parse([body], dialect="openai-chat")
    assert (message.status, message.text, message.seq_source) == (
        Status.COMPLETED,
        "a",
        "position",
    )
    assert [frame.seq for frame in message.trace.frames] == [1, 2, 3]


def test_a_later_block_id_that_is_no_seq_follows_the_one_before() -> None:
    body = sse(chat("a"), id="10") + sse(chat("b"), id="9" * 4301) + sse(chat(finish="stop"))
    message = parse([body + DONE], dialect="openai-chat")
    assert message.seq_source == "block_id"
    assert [frame.seq for frame in message.trace.frames] == [10, 11, 12, 13]
    assert (message.status, message.text) == (Status.COMPLETED, "ab")


def test_the_providers_sequence_number_dedupes_a_replayed_responses_stream() -> None:
    body = responses_body(["x", "y"])
    frames = body.split(b"\n\n")[:-1]
    replay = b"\n\n".join(frames[1:3]) + b"\n\n"
    message = parse(
        [body[: -len(frames[-1]) - 2] + replay + frames[-1] + b"\n\n"], dialect="openai-responses"
    )
    assert (message.text, message.last_seq, message.duplicates) == ("xy", 3, 2)
    assert message.status is Status.COMPLETED


# -- frames --------------------------------------------------------------------------------------


def test_frames_carry_what_the_proxy_and_client_need() -> None:
    receiver = StreamReceiver("anthropic")
    body = anthropic_body(["Hi"])
    frames = receiver.receive_data(body, t=2.5)
    assert isinstance(frames[0], Frame)
    assert [frame.seq for frame in frames] == list(range(1, 8))
    assert all(frame.committed for frame in frames)
    assert b"".join(frame.sse.raw for frame in frames) == body
    assert sum(frame.nbytes for frame in frames) == len(body)
    assert [frame.is_content for frame in frames] == [
        False,  # message_start: start + usage
        False,  # content_block_start of an empty text block
        False,  # ping
        True,  # text
        False,  # content_block_stop
        True,  # message_delta: the finish reason
        True,  # message_stop: the end marker
    ]
    assert frames[2].events == [Ping(seq=3)]
    assert frames[3].events == [TextDelta(seq=4, text="Hi")]
    assert frames[6].events == [StreamEnd(seq=7, marker="message_stop")]
    assert {frame.t for frame in frames} == {2.5}
    assert receiver.receive_eof(3.0) == []
    assert receiver.message.usage == Usage(seq=6, input_tokens=25, output_tokens=15)


def test_a_duplicate_frame_is_returned_but_not_committed() -> None:
    receiver = StreamReceiver("openai-chat")
    first = sse(chat("a"), id="s:1")
    receiver.receive_data(first)
    [again] = receiver.receive_data(first)
    assert (again.seq, again.committed, again.events) == (1, False, [TextDelta(seq=1, text="a")])
    assert receiver.message.text == "a"


# -- decoder and payload errors ------------------------------------------------------------------


def test_malformed_json_fails_with_the_frame_number_and_offset() -> None:
    good = sse(chat("kept"))
    body = good + b"data: {not json\n\n" + sse(chat("never"))
    for chunks in chunkings(body):
        message = parse(chunks, dialect="openai-chat")
        assert (message.status, message.text, message.last_seq) == (Status.FAILED, "kept", 1)
        assert isinstance(message.error, PayloadError)
        assert (message.error.line, message.error.offset) == (2, len(good))
        assert [frame.outcome for frame in message.trace.frames] == ["committed", "error"]
        assert message.trace.frames[1].raw == b"data: {not json\n\n"


@pytest.mark.parametrize(
    ("dialect", "bad"),
    [("gemini", {"candidates": ["not a candidate"]}),
     ("openai-chat", {"choices": [{"index": 0, "delta": "not a delta"}]})],
)
def test_a_payload_in_an_undocumented_shape_fails_the_message_not_the_caller(
    dialect: str, bad: dict[str, object]
) -> None:
    kept = {"candidates": [{"content": {"parts": [{"text": "kept"}]}}]}
    good = sse(kept) if dialect == "gemini" else sse(chat("kept"))
    body = good + sse(bad) + sse(chat("never"))
    for chunks in chunkings(body):
        message = parse(chunks, dialect=dialect)
        assert (message.status, message.text) == (Status.FAILED, "kept")
        assert isinstance(message.error, PayloadError)
        assert "unexpected payload shape" in str(message.error)
        assert (message.error.line, message.error.offset) == (2, len(good))
        assert message.trace.frames[-1].outcome == "error"


def test_an_event_over_max_event_size_fails_after_committing_earlier_frames() -> None:
    small = sse(chat("ok"))
    body = small + sse(chat("x" * 500)) + sse(chat(finish="stop"))
    message = parse([body], dialect="openai-chat", max_event_size=300)
    assert (message.status, message.text) == (Status.FAILED, "ok")
    assert isinstance(message.error, EventTooLargeError)
    assert message.error.limit == 300


def test_a_bad_byte_in_an_sse_block_held_at_eof_fails_the_message() -> None:
    # The last block ends in LF CR, so it waits for the next byte (an LF would be its own); EOF
    # dispatches it. It is complete, so invalid UTF-8 in it is a decoding error, not a cut.
    good = sse(chat("kept"))
    bad = b"data: \xff\r\n\r"
    for chunks in chunkings(good + bad):
        message = parse(chunks, dialect="openai-chat")
        assert (message.status, message.text, message.last_seq) == (Status.FAILED, "kept", 1)
        assert isinstance(message.error, DecodingError)
        assert message.error.offset == len(good) + 6
    receiver = StreamReceiver("openai-chat")
    assert [frame.seq for frame in receiver.receive_data(good + bad)] == [1]
    assert receiver.receive_eof() == []
    assert (receiver.finished, receiver.message.status) == (True, Status.FAILED)
    assert isinstance(receiver.message.error, DecodingError)
    assert receiver.message.error.offset == len(good) + 6


def test_a_malformed_ndjson_line_fails_with_its_line_number() -> None:
    body = ollama_body(["a"]).replace(b"\n", b"\n{oops}\n", 1)
    message = parse([body], dialect="ollama")
    assert (message.status, message.text) == (Status.FAILED, "a")
    assert isinstance(message.error, PayloadError)
    assert message.error.line == 2


@pytest.mark.parametrize("body", [b"[1, 2]\n", b"[1, 2]"])
def test_an_ndjson_line_that_is_not_an_object_fails(body: bytes) -> None:
    message = parse([body], dialect="ollama")
    assert message.status is Status.FAILED
    assert isinstance(message.error, PayloadError)
    assert message.error.line == 1


def test_an_ndjson_body_cut_inside_its_last_line_is_interrupted_not_failed() -> None:
    body = ollama_body(["你好", "世界"])
    cut = body[: body.index("世".encode()) + 2]
    for chunks in chunkings(cut):
        message = parse(chunks, dialect="ollama")
        assert (message.status, message.text, message.last_seq) == (
            Status.INTERRUPTED,
            "你好",
            1,
        )
        assert message.error is None
        assert codes(message) == ["unterminated_tail", "truncated_utf8", "no_finish_reason"]


def test_an_ndjson_final_line_without_lf_is_still_a_value() -> None:
    message = parse([ollama_body(["a"]).rstrip(b"\n")], dialect="ollama")
    assert (message.status, message.text, message.warnings) == (Status.COMPLETED, "a", [])


def test_an_ndjson_error_line_fails_with_the_provider_error() -> None:
    body = ollama_body(["a"]).split(b"\n")[0] + b"\n" + json.dumps({"error": "boom"}).encode()
    message = parse([body + b"\n"], dialect="ollama")
    assert (message.status, message.text) == (Status.FAILED, "a")
    assert str(message.error) == "error: boom"


def test_no_data_after_the_receiver_finished() -> None:
    receiver = StreamReceiver("openai-chat")
    receiver.receive_data(b"data: \xff\n\n")
    assert receiver.finished
    assert isinstance(receiver.message.error, DecodingError)
    with pytest.raises(LocalProtocolError):
        receiver.receive_data(b"more")
    with pytest.raises(LocalProtocolError):
        receiver.receive_eof()


# -- ending early and reconnecting ---------------------------------------------------------------


def test_close_with_a_transport_error_interrupts() -> None:
    receiver = StreamReceiver("openai-chat")
    receiver.receive_data(sse(chat("half")))
    receiver.close(TransportError("connection reset"))
    assert receiver.finished
    assert (receiver.message.status, receiver.message.text) == (Status.INTERRUPTED, "half")


def test_close_cancelled_by_the_caller() -> None:
    receiver = StreamReceiver("openai-chat")
    receiver.receive_data(sse(chat("x")))
    receiver.close(cancelled=True)
    assert receiver.message.status is Status.CANCELLED


def test_reconnect_resumes_the_same_message_and_dedupes_the_replay() -> None:
    frames = [sse(chat(word), id=f"str_1:{n}") for n, word in enumerate(["a", "b", "c"], 1)]
    frames.append(sse(chat(finish="stop"), id="str_1:4"))
    frames.append(sse("[DONE]", id="str_1:5"))
    receiver = StreamReceiver("openai-chat")
    receiver.receive_data(frames[0] + frames[1] + frames[2][:9])
    receiver.close(TransportError("reset"))
    assert receiver.message.status is Status.INTERRUPTED
    again = receiver.reconnect(last_event_id="str_1:2")
    assert again.message is receiver.message
    assert again.message.status is Status.STREAMING
    replayed = again.receive_data(frames[1] + frames[2] + frames[3] + frames[4])
    assert [(frame.seq, frame.committed) for frame in replayed] == [
        (2, False),
        (3, True),
        (4, True),
        (5, True),
    ]
    again.receive_eof()
    message = again.message
    assert (message.status, message.text, message.duplicates) == (Status.COMPLETED, "abc", 1)
    assert again._decoder is not None


@pytest.mark.parametrize("dialect", ["anthropic", "gemini"])
def test_reconnect_keeps_the_dialect_object_so_an_open_tool_call_goes_on(dialect: str) -> None:
    start: list[dict[str, Any]] = [{"candidates": [{"content": {"parts": [{"functionCall": {
        "name": "f", "willContinue": True, "partialArgs": [
            {"jsonPath": "$.q", "stringValue": "a", "willContinue": True}]}}]}}]}]
    rest: list[dict[str, Any]] = [{"candidates": [{"content": {"parts": [{"functionCall": {
        "partialArgs": [{"jsonPath": "$.q", "stringValue": "b"}]}}]}, "finishReason": "STOP"}]}]
    if dialect == "anthropic":
        start = [
            {"type": "message_start", "message": {"id": "m", "model": "c", "usage": {}}},
            {"type": "content_block_start", "index": 0,
             "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "input_json_delta", "partial_json": '{"q":"a'}}]
        rest = [
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "input_json_delta", "partial_json": 'b"}'}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}}]
    ids = iter(range(1, 10))
    receiver = StreamReceiver(dialect)
    receiver.receive_data(b"".join(sse(p, id=str(next(ids))) for p in start))
    receiver.close(TransportError("reset"))
    other = receiver.reconnect()
    assert other.dialect is receiver.dialect
    other.receive_data(b"".join(sse(p, id=str(next(ids))) for p in rest))
    other.receive_eof()
    [call] = other.message.tool_calls
    assert (call.name, call.arguments, other.message.finish_reason) == (
        "f", '{"q":"ab"}', FinishReason.TOOL_CALLS)


def test_reconnect_of_a_still_open_receiver_keeps_streaming() -> None:
    receiver = StreamReceiver("ollama")
    receiver.receive_data(ollama_body(["a", "b"]).split(b"\n")[0] + b"\n")
    again = receiver.reconnect()
    body = ollama_body(["a", "b"])
    again.receive_data(body)  # a position source replays from the start: dedupe by position
    again.receive_eof()
    assert (again.message.status, again.message.text, again.message.duplicates) == (
        Status.COMPLETED,
        "ab",
        1,
    )


def test_a_completed_message_cannot_reconnect() -> None:
    receiver = StreamReceiver("openai-chat")
    receiver.receive_data(chat_body("x"))
    receiver.receive_eof()
    with pytest.raises(LocalProtocolError, match="cannot resume a completed message"):
        receiver.reconnect()


def test_gemini_reconnect_sniffs_the_new_body_again() -> None:
    receiver = StreamReceiver("gemini")
    receiver.close(TransportError("refused"))
    again = receiver.reconnect()
    again.receive_data(b"[")
    assert again.message.status is Status.FAILED


def test_an_existing_message_can_be_passed_in() -> None:
    message = Message(trace=False)
    receiver = StreamReceiver("openai-chat", message=message)
    receiver.receive_data(chat_body("z"))
    receiver.receive_eof()
    assert (message.status, message.text, message.trace.frames) == (Status.COMPLETED, "z", [])


def test_an_unterminated_tail_with_a_bad_byte_inside_is_not_a_half_character() -> None:
    message = parse([sse(chat("a")) + b"data: \xff still cut"], dialect="openai-chat")
    assert (message.status, message.text) == (Status.INTERRUPTED, "a")
    assert codes(message) == ["unterminated_tail", "no_finish_reason"]


def test_a_malformed_payload_without_trace_still_fails() -> None:
    message = parse([sse(chat("a")) + b"data: {\n\n"], dialect="openai-chat", trace=False)
    assert (message.status, message.text, message.trace.frames) == (Status.FAILED, "a", [])
    assert isinstance(message.error, PayloadError)
    assert (message.error.line, message.error.offset) == (2, len(sse(chat("a"))))
