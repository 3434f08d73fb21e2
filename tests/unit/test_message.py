"""Message: commits whole frames, dedupes by seq, and decides the end state (hand-built events)."""

from __future__ import annotations

import pytest

from unbroken.errors import (
    DecodingError,
    EventTooLargeError,
    LocalProtocolError,
    PayloadError,
    ProviderError,
    SequenceError,
    TransportError,
)
from unbroken.events import (
    ErrorEvent,
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
from unbroken.message import Message, ToolCall

STOP = (Status.COMPLETED, FinishReason.STOP)


def text(seq: int, value: str) -> list[TextDelta]:
    return [TextDelta(seq=seq, text=value)]


def fin(seq: int, raw: str = "stop", outcome: tuple[Status, FinishReason] = STOP) -> Finish:
    return Finish(seq=seq, status=outcome[0], reason=outcome[1], raw=raw)


def codes(message: Message) -> list[str]:
    return [warning.code for warning in message.warnings]


def finished(*, end: bool = True, outcome: tuple[Status, FinishReason] = STOP) -> Message:
    message = Message()
    message.commit(1, text(1, "Hello"))
    message.commit(2, [fin(2, "raw-reason", outcome)])
    if end:
        message.commit(3, [StreamEnd(seq=3, marker="[DONE]")])
    return message


def test_a_new_message_is_pending_and_empty() -> None:
    message = Message()
    assert message.status is Status.PENDING
    assert (message.last_seq, message.text, message.reasoning) == (-1, "", "")
    assert (message.finish_reason, message.raw_finish_reason, message.error) == (None, None, None)
    assert (message.tool_calls, message.usage, message.duplicates, message.gaps) == (
        [],
        None,
        0,
        [],
    )
    assert message.closed is False


def test_text_is_joined_from_parts_and_stays_correct_between_reads() -> None:
    message = Message()
    assert message.commit(0, text(0, "你")) is True
    assert message.text == "你"
    message.commit(1, [TextDelta(seq=1, text="好"), TextDelta(seq=1, text="世")])
    assert message.text == "你好世"
    message.commit(2, text(2, "world"))
    assert message.text == "你好世world"
    assert message.status is Status.STREAMING
    assert message.last_seq == 2


def test_a_message_that_keeps_no_text_still_follows_the_stream() -> None:
    message = Message(keep_text=False)
    assert message.commit(1, text(1, "Hello")) is True
    message.commit(2, [TextDelta(seq=2, text="a"), TextDelta(seq=2, text="b")])
    assert (message.status, message.last_seq) == (Status.STREAMING, 2)
    message.commit(3, [fin(3)])
    message.commit(4, [StreamEnd(seq=4, marker="[DONE]")])
    assert (message.finish_reason, message.raw_finish_reason, codes(message)) == (
        FinishReason.STOP, "stop", [])
    with pytest.raises(RuntimeError, match="keeps no text"):
        _ = message.text
    assert Message().text == ""  # another message keeps its own text as before


def test_reasoning_is_kept_apart_with_its_signature() -> None:
    message = Message()
    message.commit(1, [ReasoningDelta(seq=1, text="think ")])
    message.commit(2, [ReasoningDelta(seq=2, text="more"), ReasoningDelta(seq=2, signature="sig")])
    message.commit(3, text(3, "answer"))
    assert (message.reasoning, message.text, message.reasoning_signature) == (
        "think more",
        "answer",
        "sig",
    )


def test_a_frame_with_seq_not_above_last_seq_is_counted_never_applied() -> None:
    message = Message()
    for seq, piece in enumerate(["a", "b", "c"], start=1):
        message.commit(seq, text(seq, piece))
    assert message.commit(3, text(3, "c")) is False
    assert message.commit(2, text(2, "b")) is False
    assert message.commit(1, [fin(1)]) is False
    assert (message.text, message.last_seq, message.duplicates) == ("abc", 3, 3)
    assert message.finish_reason is None
    message.close()
    assert "duplicate" in codes(message)


def test_a_gap_in_a_contiguous_source_is_recorded() -> None:
    message = Message(seq_source="proxy")
    message.commit(1, text(1, "a"))
    message.commit(2, text(2, "b"))
    message.commit(6, text(6, "f"))
    assert message.gaps == [(2, 6)]
    assert message.warnings[0].code == "gap"
    assert message.warnings[0].detail == "frames 3..5 never arrived"
    assert message.warnings[0].seq == 6
    assert message.text == "abf"


@pytest.mark.parametrize("source", [None, "block_id"])
def test_no_gaps_for_a_source_that_may_skip_numbers(source: str | None) -> None:
    message = Message(seq_source=source)
    message.commit(10, text(10, "a"))
    message.commit(20, text(20, "b"))
    assert message.gaps == []


def test_finish_and_end_marker_complete_the_message_without_warnings() -> None:
    message = finished()
    assert message.status is Status.STREAMING  # decided only by the close
    assert message.close() is Status.COMPLETED
    assert (message.finish_reason, message.raw_finish_reason) == (FinishReason.STOP, "raw-reason")
    assert (message.end_marker, message.warnings, message.error) == ("[DONE]", [], None)
    assert message.closed is True


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        ((Status.TRUNCATED, FinishReason.LENGTH), Status.TRUNCATED),
        ((Status.FILTERED, FinishReason.CONTENT_FILTER), Status.FILTERED),
        ((Status.COMPLETED, FinishReason.TOOL_CALLS), Status.COMPLETED),
        ((Status.COMPLETED, FinishReason.PAUSE), Status.COMPLETED),
    ],
)
def test_the_finish_event_decides_the_status(
    outcome: tuple[Status, FinishReason], status: Status
) -> None:
    message = finished(outcome=outcome)
    assert message.close() is status
    assert message.finish_reason is outcome[1]
    assert message.text == "Hello"


def test_a_finish_without_the_end_marker_still_decides_with_a_warning() -> None:
    message = finished(end=False)
    assert message.close() is Status.COMPLETED
    assert codes(message) == ["no_end_marker"]


def test_no_end_marker_warning_for_a_protocol_without_one() -> None:
    message = finished(end=False)
    message.expect_end_marker = False
    assert message.close() is Status.COMPLETED
    assert message.warnings == []


def test_an_unmapped_reason_completes_as_other_and_warns() -> None:
    message = finished(outcome=(Status.COMPLETED, FinishReason.OTHER))
    assert message.close() is Status.COMPLETED
    assert message.finish_reason is FinishReason.OTHER
    assert message.raw_finish_reason == "raw-reason"
    assert codes(message) == ["unmapped_reason"]
    assert message.warnings[0].seq == 2


def test_a_failing_finish_reason_fails_with_a_provider_error() -> None:
    message = finished(outcome=(Status.FAILED, FinishReason.ERROR))
    assert message.close() is Status.FAILED
    assert isinstance(message.error, ProviderError)
    assert message.error.event.type == "raw-reason"
    assert message.error.retryable is False


def test_no_finish_reason_is_interrupted() -> None:
    message = Message()
    message.commit(1, text(1, "半句"))
    assert message.close() is Status.INTERRUPTED
    assert message.finish_reason is None
    assert message.text == "半句"
    assert codes(message) == ["no_finish_reason"]


def test_an_empty_body_is_interrupted() -> None:
    message = Message()
    assert message.close() is Status.INTERRUPTED
    assert message.last_seq == -1


def test_the_end_marker_alone_is_not_completion() -> None:
    message = Message()
    message.commit(1, text(1, "Hel"))
    message.commit(2, [StreamEnd(seq=2, marker="[DONE]")])
    assert message.close() is Status.INTERRUPTED
    assert codes(message) == ["end_without_finish", "no_finish_reason"]


def test_a_finish_after_the_end_marker_still_decides() -> None:
    message = Message()
    message.commit(1, [StreamEnd(seq=1, marker="done"), fin(1)])
    assert message.close() is Status.COMPLETED
    assert message.warnings == []


def test_an_error_event_fails_the_message_with_the_provider_error() -> None:
    message = Message()
    message.commit(1, text(1, "partial"))
    event = ErrorEvent(seq=2, type="overloaded_error", message="Overloaded", retryable=True)
    message.commit(2, [event])
    message.commit(3, [StreamEnd(seq=3, marker="message_stop")])
    assert message.close() is Status.FAILED
    assert isinstance(message.error, ProviderError)
    assert message.error.event is event
    assert message.error.retryable is True
    assert message.text == "partial"
    # design.md: an error in the stream is failed / error, the raw reason its error type.
    assert message.finish_reason is FinishReason.ERROR
    assert message.raw_finish_reason == "overloaded_error"


def test_an_error_event_with_a_failing_finish_in_one_frame() -> None:
    message = Message()
    error = ErrorEvent(seq=1, type="server_error", message="boom", retryable=True)
    message.commit(1, [error, fin(1, "failed", (Status.FAILED, FinishReason.ERROR))])
    assert message.close() is Status.FAILED
    assert isinstance(message.error, ProviderError)
    assert message.error.event is error
    assert message.finish_reason is FinishReason.ERROR


def test_an_error_after_the_finish_reason_fails_the_message() -> None:
    message = finished(end=False)
    message.commit(3, [ErrorEvent(seq=3, type="api_error", message="x", retryable=True)])
    assert message.close() is Status.FAILED
    assert isinstance(message.error, ProviderError)


def test_a_second_provider_error_is_a_warning_and_the_first_stands() -> None:
    message = Message()
    message.commit(1, [ErrorEvent(seq=1, type="first", message="a", retryable=False)])
    message.commit(2, [ErrorEvent(seq=2, type="second", message="b", retryable=False)])
    message.close(TransportError("reset"))
    assert isinstance(message.error, ProviderError)
    assert message.error.event.type == "first"
    assert codes(message) == ["second_error", "error"]
    assert message.status is Status.FAILED


@pytest.mark.parametrize(
    "error",
    [
        DecodingError("bad", offset=17),
        PayloadError("bad json", line=3, offset=40),
        EventTooLargeError("big", limit=10, offset=0),
    ],
)
def test_a_protocol_error_fails_the_message_and_keeps_the_text(error: Exception) -> None:
    message = Message()
    message.commit(1, text(1, "kept"))
    assert isinstance(error, DecodingError | PayloadError | EventTooLargeError)
    assert message.close(error) is Status.FAILED
    assert message.error is error
    assert message.text == "kept"


def test_invalid_utf8_is_a_warning_with_its_offset() -> None:
    message = Message()
    message.close(DecodingError("bad", offset=17))
    assert message.warnings[0].code == "invalid_utf8"
    assert message.warnings[0].detail == "invalid UTF-8 at byte offset 17"


def test_a_broken_transport_without_finish_is_interrupted_with_the_error() -> None:
    message = Message()
    message.commit(1, text(1, "half"))
    error = TransportError("connection reset")
    assert message.close(error) is Status.INTERRUPTED
    assert message.error is error
    assert codes(message) == ["error", "no_finish_reason"]


def test_the_end_marker_then_a_payload_error_fails() -> None:
    message = Message()
    message.commit(1, [StreamEnd(seq=1, marker="[DONE]")])
    assert message.close(PayloadError("junk")) is Status.FAILED


@pytest.mark.parametrize("error", [TransportError("reset"), PayloadError("junk after the finish")])
def test_after_a_finish_reason_a_later_error_does_not_change_the_verdict(
    error: TransportError | PayloadError,
) -> None:
    message = finished(end=False)
    assert message.close(error) is Status.COMPLETED
    assert message.error is None
    assert codes(message) == ["late_error", "no_end_marker"]


def test_cancelled_when_the_caller_stops_reading() -> None:
    message = Message()
    message.commit(1, text(1, "abc"))
    assert message.close(cancelled=True) is Status.CANCELLED
    assert message.finish_reason is None
    assert message.text == "abc"


def test_cancelling_after_the_finish_reason_keeps_the_finish() -> None:
    message = finished()
    assert message.close(cancelled=True) is Status.COMPLETED


def test_cancelling_after_an_error_event_is_failed() -> None:
    message = Message()
    message.commit(1, [ErrorEvent(seq=1, type="e", message="m", retryable=False)])
    assert message.close(cancelled=True) is Status.FAILED


def test_the_end_marker_then_cancel_is_cancelled() -> None:
    message = Message()
    message.commit(1, [StreamEnd(seq=1, marker="[DONE]")])
    assert message.close(cancelled=True) is Status.CANCELLED


def test_closing_twice_changes_nothing() -> None:
    message = Message()
    message.commit(1, text(1, "x"))
    assert message.close(TransportError("reset")) is Status.INTERRUPTED
    warnings = list(message.warnings)
    assert message.close(PayloadError("late")) is Status.INTERRUPTED
    assert message.close(cancelled=True) is Status.INTERRUPTED
    assert message.warnings == warnings
    assert isinstance(message.error, TransportError)


def test_text_after_the_finish_is_a_sequence_error_and_the_frame_is_left_out() -> None:
    message = finished(end=False)
    usage = Usage(seq=3, output_tokens=5)
    assert message.commit(3, [usage, TextDelta(seq=3, text="extra")]) is False
    assert (message.text, message.usage, message.last_seq) == ("Hello", None, 2)
    [problem] = message.sequence_errors
    assert isinstance(problem, SequenceError)
    assert (problem.state, problem.kind, problem.seq) == ("finished", "TextDelta", 3)
    assert codes(message) == ["sequence_error"]
    assert message.trace.frames[-1].outcome == "ignored"
    # The message is intact: the end marker still commits and the finish still decides.
    assert message.commit(4, [StreamEnd(seq=4, marker="[DONE]")]) is True
    assert message.close() is Status.COMPLETED


@pytest.mark.parametrize(
    "event",
    [
        TextDelta(seq=9, text="late"),
        Ping(seq=9),
        Finish(seq=9, status=Status.COMPLETED, reason=FinishReason.STOP, raw="stop"),
        StreamEnd(seq=9, marker="[DONE]"),
    ],
)
def test_nothing_commits_after_the_close(event: TextDelta | Ping | Finish | StreamEnd) -> None:
    message = Message()
    message.commit(1, text(1, "x"))
    message.close()
    assert message.commit(9, [event]) is False
    assert message.text == "x"
    assert message.last_seq == 1
    assert message.status is Status.INTERRUPTED
    assert message.sequence_errors[0].state == "interrupted"


@pytest.mark.parametrize("phase_events", [[], [StreamEnd(seq=1, marker="m")]])
def test_content_after_end_marker_or_error_is_rejected(phase_events: list[StreamEnd]) -> None:
    message = Message()
    message.commit(1, phase_events or [ErrorEvent(seq=1, type="e", message="", retryable=False)])
    assert message.commit(2, [ToolCallDelta(seq=2, index=0, arguments="{}")]) is False
    assert message.tool_calls == []


def test_resume_moves_interrupted_back_to_streaming() -> None:
    message = Message()
    message.commit(1, text(1, "Hel"))
    message.close(TransportError("reset"))
    message.resume()
    assert message.status is Status.STREAMING
    assert message.error is None
    assert message.commit(1, text(1, "Hel")) is False  # replayed: a duplicate
    message.commit(2, text(2, "lo"))
    message.commit(3, [fin(3), StreamEnd(seq=3, marker="[DONE]")])
    assert message.close() is Status.COMPLETED
    assert message.text == "Hello"
    assert "resumed" in codes(message)


@pytest.mark.parametrize("ending", ["completed", "failed", "cancelled", "streaming", "pending"])
def test_only_interrupted_can_resume(ending: str) -> None:
    message = Message()
    if ending == "completed":
        message = finished()
        message.close()
    elif ending == "failed":
        message.close(PayloadError("x"))
    elif ending == "cancelled":
        message.close(cancelled=True)
    elif ending == "streaming":
        message.commit(1, text(1, "x"))
    with pytest.raises(LocalProtocolError, match=f"cannot resume a {ending} message"):
        message.resume()


def test_tool_calls_are_assembled_by_index_and_parsed_at_the_finish() -> None:
    message = Message()
    message.commit(1, [ToolCallDelta(seq=1, index=0, id="call_1", name="get_weather")])
    message.commit(2, [ToolCallDelta(seq=2, index=0, arguments='{"city": "巴')])
    message.commit(3, [ToolCallDelta(seq=3, index=0, arguments='黎"}')])
    message.commit(4, [ToolCallDelta(seq=4, index=1, id="call_2", name="now", arguments="")])
    before = message.tool_calls
    assert before[0] == ToolCall(
        index=0, id="call_1", name="get_weather", arguments='{"city": "巴黎"}', value=None
    )
    message.commit(5, [fin(5, "tool_calls", (Status.COMPLETED, FinishReason.TOOL_CALLS))])
    assert message.tool_calls == [
        ToolCall(
            index=0,
            id="call_1",
            name="get_weather",
            arguments='{"city": "巴黎"}',
            value={"city": "巴黎"},
        ),
        ToolCall(index=1, id="call_2", name="now", arguments="", value={}),
    ]


def test_tool_call_id_and_name_keep_their_first_value() -> None:
    message = Message()
    message.commit(1, [ToolCallDelta(seq=1, index=3, id="a", name="f", arguments="[1")])
    message.commit(2, [ToolCallDelta(seq=2, index=3, name="g", arguments=",2]")])
    message.close()
    assert message.tool_calls == [
        ToolCall(index=3, id="a", name="f", arguments="[1,2]", value=[1, 2])
    ]


def test_another_id_at_a_calls_index_is_another_call() -> None:
    message = Message()
    message.commit(1, [ToolCallDelta(seq=1, index=3, id="a", name="f", arguments="[1]")])
    message.commit(2, [ToolCallDelta(seq=2, index=3, id="b", name="g", arguments="[2]")])
    message.close()
    assert message.tool_calls == [
        ToolCall(index=3, id="a", name="f", arguments="[1]", value=[1]),
        ToolCall(index=3, id="b", name="g", arguments="[2]", value=[2]),
    ]
    assert codes(message)[0] == "tool_index_reused"


def test_tool_arguments_that_are_not_json_keep_the_text_and_warn() -> None:
    message = Message()
    message.commit(1, [ToolCallDelta(seq=1, index=0, name="f", arguments='{"a": ')])
    message.close()
    assert message.tool_calls[0].arguments == '{"a": '
    assert message.tool_calls[0].value is None
    assert codes(message) == ["tool_arguments", "no_finish_reason"]


def test_a_resume_reopens_a_tool_call_cut_by_the_interruption() -> None:
    message = Message()
    message.commit(1, [ToolCallDelta(seq=1, index=0, name="f", arguments='{"a"')])
    message.close(TransportError("reset"))
    message.resume()
    message.commit(2, [ToolCallDelta(seq=2, index=0, arguments=": 1}")])
    message.close()
    assert message.tool_calls[0].arguments == '{"a": 1}'
    assert message.tool_calls[0].value == {"a": 1}


def test_usage_reports_replace_field_by_field() -> None:
    message = Message()
    message.commit(
        1, [MessageStart(seq=1, id="msg_1"), Usage(seq=1, input_tokens=10, output_tokens=1)]
    )
    message.commit(2, [Usage(seq=2, output_tokens=42, cached_tokens=3)])
    assert message.usage == Usage(
        seq=2, input_tokens=10, output_tokens=42, total_tokens=None, cached_tokens=3
    )
    assert message.status is Status.PENDING  # start and usage are not content


def test_message_start_keeps_the_first_id_and_model() -> None:
    message = Message()
    message.commit(1, [MessageStart(seq=1, id="a", model=None)])
    message.commit(2, [MessageStart(seq=2, id="b", model="m")])
    message.commit(3, [MessageStart(seq=3, id="c", model="n")])
    assert (message.id, message.model) == ("a", "m")


def test_pings_and_unknown_events_change_nothing_but_last_seq() -> None:
    message = Message()
    message.commit(1, [Ping(seq=1)])
    message.commit(2, [UnknownEvent(seq=2, type="response.in_progress", raw={})])
    assert message.status is Status.PENDING
    assert (message.text, message.last_seq) == ("", 2)


def test_a_second_different_finish_warns_and_the_first_stands() -> None:
    message = finished(end=False)
    message.commit(3, [fin(3, "raw-reason")])  # the same reason again: silent
    message.commit(4, [fin(4, "length", (Status.TRUNCATED, FinishReason.LENGTH))])
    assert codes(message) == ["finish_conflict"]
    assert message.close() is Status.COMPLETED


def test_an_empty_frame_commits_and_moves_last_seq() -> None:
    message = Message()
    assert message.commit(4, []) is True
    assert message.last_seq == 4


def test_without_trace_the_message_still_works() -> None:
    message = Message(trace=False)
    message.commit(1, text(1, "x"))
    message.commit(1, text(1, "x"))
    message.commit(2, [fin(2)])
    message.commit(3, [TextDelta(seq=3, text="late")])
    assert message.close() is Status.COMPLETED
    assert message.trace.frames == []
    assert (message.text, message.duplicates, len(message.sequence_errors)) == ("x", 1, 1)
    assert message.trace.warnings is message.warnings


def test_not_even_an_empty_frame_commits_after_the_close() -> None:
    message = Message()
    message.close()
    assert message.commit(5, []) is False
    assert message.last_seq == -1
    assert message.sequence_errors[0].kind == "empty frame"


def provisional(seq: int, raw: str = "STOP") -> Finish:
    return Finish(
        seq=seq, status=Status.COMPLETED, reason=FinishReason.STOP, raw=raw, final=False
    )


def test_content_after_a_provisional_finish_supersedes_it() -> None:
    # Gemini's older models put finishReason STOP on every chunk: the last one stands.
    message = Message()
    assert message.commit(1, [TextDelta(seq=1, text="一"), provisional(1)]) is True
    assert message.finish_reason is FinishReason.STOP
    assert message.commit(2, [TextDelta(seq=2, text="二")]) is True
    assert message.finish is None
    assert message.commit(3, [TextDelta(seq=3, text="三"), provisional(3, "MAX_TOKENS")]) is True
    assert message.close() is Status.COMPLETED
    assert message.text == "一二三"
    assert message.raw_finish_reason == "MAX_TOKENS"
    assert message.sequence_errors == []


def test_a_provisional_finish_then_a_cut_body_still_decides() -> None:
    message = Message()
    message.commit(1, [TextDelta(seq=1, text="一"), provisional(1)])
    assert message.close(TransportError("cut")) is Status.COMPLETED
    assert message.finish_reason is FinishReason.STOP


def test_a_provisional_finish_after_a_final_one_does_not_reopen_the_message() -> None:
    message = finished(end=False)
    assert message.commit(3, [provisional(3)]) is True
    assert message.commit(4, text(4, "late")) is False
    assert message.text == "Hello"
    assert message.close() is Status.COMPLETED
    assert message.raw_finish_reason == "raw-reason"
