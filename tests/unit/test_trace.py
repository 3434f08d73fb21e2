"""Trace: per-frame evidence, the raw byte budget, and the three-column render."""

from __future__ import annotations

from unbroken.errors import TransportError
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
from unbroken.message import Message
from unbroken.trace import Trace, TracedFrame, TraceWarning, describe


def test_every_frame_is_recorded_with_its_outcome() -> None:
    message = Message()
    first = [TextDelta(seq=1, text="a")]
    message.commit(1, first, 0.5, 20, "1", b"id: 1\ndata: a\n\n")
    message.commit(1, first, 0.6, 20, "1", b"id: 1\ndata: a\n\n")
    message.commit(2, [Finish(seq=2, status=Status.COMPLETED, reason=FinishReason.STOP, raw="s")])
    message.commit(3, [TextDelta(seq=3, text="late")])
    assert [frame.outcome for frame in message.trace.frames] == [
        "committed",
        "duplicate",
        "committed",
        "ignored",
    ]
    frame = message.trace.frames[0]
    assert frame == TracedFrame(
        seq=1,
        block_id="1",
        nbytes=20,
        t=0.5,
        events=first,
        outcome="committed",
        raw=b"id: 1\ndata: a\n\n",
    )
    assert frame.kinds == ("TextDelta",)
    assert frame.delta == "text 'a'"


def test_raw_bytes_are_kept_only_within_the_budget() -> None:
    message = Message(raw_budget=10)
    message.commit(1, [Ping(seq=1)], raw=b"123456")
    message.commit(2, [Ping(seq=2)], raw=b"123456")
    message.commit(3, [Ping(seq=3)], raw=b"1234")
    assert [frame.raw for frame in message.trace.frames] == [b"123456", None, b"1234"]
    assert message.trace.raw_bytes == 10
    assert len(message.trace.frames) == 3  # metadata stays for every frame


def test_describe_reads_every_event_kind() -> None:
    assert [
        describe(TextDelta(seq=0, text="hi\n")),
        describe(ReasoningDelta(seq=0, text="hm")),
        describe(ReasoningDelta(seq=0, signature="sig")),
        describe(ToolCallDelta(seq=0, index=1, id="call_9", name="f", arguments='{"a"')),
        describe(ToolCallDelta(seq=0, index=1, arguments="1}")),
        describe(Finish(seq=0, status=Status.TRUNCATED, reason=FinishReason.LENGTH, raw="max")),
        describe(ErrorEvent(seq=0, type="overloaded_error", message="busy", retryable=True)),
        describe(ErrorEvent(seq=0, type="invalid", message="no", retryable=False)),
        describe(StreamEnd(seq=0, marker="[DONE]")),
        describe(Usage(seq=0, input_tokens=3, output_tokens=4, cached_tokens=0)),
        describe(Usage(seq=0)),
        describe(MessageStart(seq=0, id="msg_1", model="m")),
        describe(MessageStart(seq=0)),
        describe(Ping(seq=0)),
        describe(UnknownEvent(seq=0, type="response.queued")),
    ] == [
        "text 'hi\\n'",
        "reasoning 'hm'",
        "reasoning '' (signature)",
        "tool[1] call_9 f '{\"a\"'",
        "tool[1] '1}'",
        "finish length (truncated, raw 'max')",
        "error overloaded_error: busy, retryable",
        "error invalid: no",
        "end [DONE]",
        "usage in=3 out=4 cached=0",
        "usage",
        "start msg_1 m",
        "start",
        "ping",
        "unknown response.queued",
    ]


def test_render_shows_three_columns_then_verdict_and_warnings() -> None:
    message = Message()
    message.commit(1, [TextDelta(seq=1, text="你好")], 0.25, 32, None, 'data: "你好"\n\n'.encode())
    message.commit(2, [TextDelta(seq=2, text="!")], 11.0, 12, None, None)
    message.close(TransportError("connection reset"))
    expected = (
        "raw lines            | parsed delta   | committed position\n"
        "---------------------+----------------+-------------------------------\n"
        "data: \"你好\"         | text '你好'    | seq 1 @32B t=0.250s committed\n"
        "(12 bytes, raw not k | text '!'       | seq 2 @44B t=11.000s committed\n"
        "ept)                 |                |\n"
        "\n"
        "verdict: interrupted, finish reason none, last seq 2, duplicates 0, gaps 0, "
        "error TransportError: connection reset\n"
        "warnings:\n"
        "  - error: TransportError: connection reset\n"
        "  - no_finish_reason: the stream ended without a finish reason\n"
    )
    assert message.trace.render(raw_width=20, delta_width=14) == expected


def test_render_wraps_long_raw_lines_and_caps_the_rows() -> None:
    message = Message()
    raw = b"data: " + b"x" * 100 + b"\n\n"
    message.commit(7, [Ping(seq=7)], 0.0, len(raw), "7", raw)
    rows = message.trace.render(raw_width=10, delta_width=4, max_rows=3).splitlines()
    assert rows[2:5] == [
        "data: xxxx | ping | seq 7 @108B t=0.000s committed",
        "xxxxxxxxxx |      |",
        "… 9 more … |      |",
    ]
    assert rows[5] == ""


def test_render_of_a_finished_message_names_the_raw_reason() -> None:
    message = Message(trace=False)
    message.commit(
        1, [Finish(seq=1, status=Status.FILTERED, reason=FinishReason.CONTENT_FILTER, raw="SAFETY")]
    )
    message.commit(1, [Ping(seq=1)])
    message.close()
    assert message.trace.render(raw_width=9, delta_width=5).splitlines()[2:] == [
        "(trace disabled: no frames recorded)",
        "",
        "verdict: filtered, finish reason content_filter (raw 'SAFETY'), last seq 1, "
        "duplicates 1, gaps 0",
        "warnings:",
        "  - no_end_marker: finish reason 'SAFETY' came without the end marker",
        "  - duplicate: 1 frame(s) with seq <= last_seq ignored",
    ]


def test_a_standalone_trace_renders_without_a_message() -> None:
    trace = Trace(warnings=[TraceWarning(code="stall", detail="no frame for 12.0 s", seq=4)])
    text = trace.render(raw_width=9, delta_width=5)
    assert text.splitlines()[2:] == [
        "",
        "verdict: (no message)",
        "warnings:",
        "  - stall (seq 4): no frame for 12.0 s",
    ]
    assert Trace().render().endswith("warnings: none\n")
