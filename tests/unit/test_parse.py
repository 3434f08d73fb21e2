"""parse(): the regression checklist, each body whole, byte by byte and split at every point.

Golden outcomes are written from the providers' references (what the model said, and how the
provider says it ended), not from the parser's output.
"""

from __future__ import annotations

import pytest
from tests.unit.test_parse_bodies import DONE, chat, chat_body, chunkings, sse

from unbroken._receiver import parse
from unbroken.errors import DecodingError, ProviderError
from unbroken.finish import FinishReason, Status
from unbroken.message import Message, ToolCall

Outcome = tuple[Status, FinishReason | None, str | None, str, int]


def outcome(message: Message) -> Outcome:
    return (
        message.status,
        message.finish_reason,
        message.raw_finish_reason,
        message.text,
        message.last_seq,
    )


def codes(message: Message) -> list[str]:
    return [warning.code for warning in message.warnings]


def every_chunking(body: bytes, dialect: str = "openai-chat") -> list[Message]:
    return [parse(chunks, dialect=dialect) for chunks in chunkings(body)]


# -- a read boundary anywhere: inside a CJK character, an escape, before the closing brace ---------

CJK_AND_ESCAPES = chat_body("你好吗", '世界\n"quoted" \\ tab\t', "\u4f60😀")


def test_the_body_is_ascii_escaped_where_we_mean_it() -> None:
    # The JSON carries the escapes the checklist asks about: \n, \", \\, \t and raw CJK bytes.
    assert b'\\n\\"quoted\\" \\\\ tab\\t' in CJK_AND_ESCAPES
    assert "你好".encode() in CJK_AND_ESCAPES


def test_any_read_boundary_gives_the_same_message() -> None:
    expected: Outcome = (
        Status.COMPLETED,
        FinishReason.STOP,
        "stop",
        '你好吗世界\n"quoted" \\ tab\t你😀',
        5,
    )
    for message in every_chunking(CJK_AND_ESCAPES):
        assert outcome(message) == expected
        assert message.warnings == []
        assert message.trace.frames[1].delta == "text '世界\\n\"quoted\" \\\\ tab\\t'"


SECOND_FRAME = len(sse(chat("你好吗")))


def cut_at(body: bytes, marker: bytes, into: int) -> bytes:
    """The body up to ``into`` bytes past ``marker`` in the second frame (the connection
    dropped there)."""
    return body[: body.index(marker, SECOND_FRAME) + into]


@pytest.mark.parametrize(
    ("where", "cut_body", "tail_codes"),
    [
        # inside 世 (3 bytes): 1 byte arrived
        ("inside a CJK character", cut_at(CJK_AND_ESCAPES, "世".encode(), 1), ["truncated_utf8"]),
        ("inside a backslash escape", cut_at(CJK_AND_ESCAPES, b'\\"quoted', 1), []),
        ("before the closing brace", cut_at(CJK_AND_ESCAPES, b'"finish_reason": null}]}', 23), []),
        ("before the blank line", cut_at(CJK_AND_ESCAPES, b"}]}\n\ndata", 4), []),
    ],
)
def test_a_body_cut_inside_a_frame_keeps_only_whole_frames(
    where: str, cut_body: bytes, tail_codes: list[str]
) -> None:
    for message in every_chunking(cut_body):
        assert outcome(message) == (Status.INTERRUPTED, None, None, "你好吗", 1), where
        assert codes(message) == ["unterminated_tail", *tail_codes, "no_finish_reason"], where


# -- every end branch -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "status", "normalized"),
    [
        ("stop", Status.COMPLETED, FinishReason.STOP),
        ("length", Status.TRUNCATED, FinishReason.LENGTH),
        ("content_filter", Status.FILTERED, FinishReason.CONTENT_FILTER),
        ("something_new", Status.COMPLETED, FinishReason.OTHER),
    ],
)
def test_end_by_finish_reason(reason: str, status: Status, normalized: FinishReason) -> None:
    body = chat_body("Hello", " world", finish=reason)
    for message in every_chunking(body):
        assert outcome(message) == (status, normalized, reason, "Hello world", 4)
        assert codes(message) == (["unmapped_reason"] if reason == "something_new" else [])


def test_end_by_tool_calls() -> None:
    first = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    body = (
        sse(chat(tool_calls=[first]))
        + sse(chat(tool_calls=[{"index": 0, "function": {"arguments": '{"city":'}}]))
        + sse(chat(tool_calls=[{"index": 0, "function": {"arguments": ' "東京"}'}}]))
        + sse(chat(finish="tool_calls"))
        + DONE
    )
    for message in every_chunking(body):
        assert outcome(message) == (Status.COMPLETED, FinishReason.TOOL_CALLS, "tool_calls", "", 5)
        assert message.tool_calls == [
            ToolCall(
                index=0,
                id="call_1",
                name="get_weather",
                arguments='{"city": "東京"}',
                value={"city": "東京"},
            )
        ]


def test_end_by_an_error_in_the_stream() -> None:
    error = {"error": {"message": "The server had an error", "type": "server_error"}}
    body = sse(chat("partial")) + sse(error)
    for message in every_chunking(body):
        assert outcome(message) == (Status.FAILED, FinishReason.ERROR, "server_error", "partial", 2)
        assert isinstance(message.error, ProviderError)
        assert message.error.event.type == "server_error"
        assert message.error.retryable is True


def test_end_by_connection_lost_between_frames() -> None:
    body = chat_body("Hello", finish=None, done=False)
    for message in every_chunking(body):
        assert outcome(message) == (Status.INTERRUPTED, None, None, "Hello", 1)
        assert codes(message) == ["no_finish_reason"]


def test_done_without_a_finish_reason_is_interrupted() -> None:
    body = chat_body("Hello", finish=None, done=True)
    for message in every_chunking(body):
        assert outcome(message) == (Status.INTERRUPTED, None, None, "Hello", 2)
        assert codes(message) == ["end_without_finish", "no_finish_reason"]


def test_a_finish_reason_without_the_end_marker_completes_with_a_warning() -> None:
    body = chat_body("Hello", finish="stop", done=False)
    for message in every_chunking(body):
        assert outcome(message) == (Status.COMPLETED, FinishReason.STOP, "stop", "Hello", 2)
        assert codes(message) == ["no_end_marker"]


def test_invalid_utf8_fails_with_its_offset_and_keeps_earlier_frames() -> None:
    good = sse(chat("ok"))
    body = good + b'data: {"x": "\xff"}\n\n' + sse(chat("never"))
    for message in every_chunking(body):
        assert outcome(message) == (Status.FAILED, None, None, "ok", 1)
        assert isinstance(message.error, DecodingError)
        assert message.error.offset == len(good) + len(b'data: {"x": "')
        assert codes(message) == ["invalid_utf8"]


# -- the last two frames sent twice with their seqs ----------------------------------------------


def test_the_last_two_frames_sent_twice_change_nothing() -> None:
    frames = [
        sse(chat("一"), id="s1:1"),
        sse(chat("二"), id="s1:2"),
        sse(chat("三"), id="s1:3"),
        sse(chat(finish="stop"), id="s1:4"),
    ]
    body = b"".join(frames) + frames[2] + frames[3] + sse("[DONE]", id="s1:5")
    for message in every_chunking(body):
        assert outcome(message) == (Status.COMPLETED, FinishReason.STOP, "stop", "一二三", 5)
        assert message.duplicates == 2
        assert [frame.outcome for frame in message.trace.frames] == [
            "committed",
            "committed",
            "committed",
            "committed",
            "duplicate",
            "duplicate",
            "committed",
        ]
        assert codes(message) == ["duplicate"]


def test_a_replay_from_an_earlier_seq_never_moves_last_seq_back() -> None:
    frames = [sse(chat(str(n)), id=f"s1:{n}") for n in range(1, 6)]
    message = parse([b"".join(frames) + frames[1] + frames[2]], dialect="openai-chat")
    assert (message.text, message.last_seq, message.duplicates) == ("12345", 5, 2)
    assert message.status is Status.INTERRUPTED


def test_capture_pairs_carry_their_receive_times() -> None:
    body = chat_body("a", "b")
    cut = body.index(b"data", 10)
    message = parse([(0.5, body[:cut]), (12.0, body[cut:])], dialect="openai-chat")
    assert [frame.t for frame in message.trace.frames] == [0.5, 12.0, 12.0, 12.0]
    assert codes(message) == ["stall"]
    assert message.warnings[0].detail == "no frame for 11.5 s (from t=0.500)"


def test_a_single_bytes_object_is_one_body_and_trace_off_records_nothing() -> None:
    message = parse(chat_body("x"), dialect="openai-chat", trace=False)
    assert outcome(message) == (Status.COMPLETED, FinishReason.STOP, "stop", "x", 3)
    assert message.trace.frames == []
