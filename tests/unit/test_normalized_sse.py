"""The normalized format, encoded from every dialect's conformance bodies: the same end state,
text, reasoning and tool calls as ``unbroken.parse`` of the same body, and bad input refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conformance.test_dialect_fixtures import GOLDENS, body_of
from tests.normalized_reading import fold_normalized

import unbroken
from unbroken._receiver import StreamReceiver
from unbroken.events import Finish, Ping, TextDelta, ToolCallDelta
from unbroken.finish import FinishReason, Status
from unbroken.normalized_sse import (
    NormalizedEncoder,
    StreamEnding,
    asks_for_normalized,
)

SID = "ub_0123456789abcdef01234567"


def encode(dialect: str, body: bytes, after: int = 0) -> tuple[bytes, int]:
    """The normalized bytes of a body, and how many of its frames the receiver committed."""
    receiver = StreamReceiver(dialect, trace=False)
    encoder = NormalizedEncoder(SID, after=after)
    out = b""
    committed = 0
    for frame in receiver.receive_data(body) + receiver.receive_eof():
        committed += frame.committed
        if frame.seq >= 0:
            out += encoder.frame(frame.seq, frame.events)
    return out + encoder.end(StreamEnding.of_message(receiver.message)), committed


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_dialect_body_ends_as_parse_says(golden: Path) -> None:
    dialect, body = golden.parent.name, body_of(golden)
    message = unbroken.parse([body], dialect=dialect)
    wire, committed = encode(dialect, body)
    got = fold_normalized(wire, SID)
    reason = message.finish_reason
    assert got["end"]["status"] == message.status.value
    assert got["end"]["finish_reason"] == (None if reason is None else reason.value)
    assert got["end"]["raw_finish_reason"] == message.raw_finish_reason
    assert got["end"]["chars"] == len(message.text)
    assert got["end"]["frames"] == committed
    assert (got["text"], got["reasoning"]) == (message.text, message.reasoning)
    calls = [got["calls"][index] for index in sorted(got["calls"])]
    assert [(c.get("id"), c.get("name"), c["arguments"]) for c in calls] == [
        (c.id, c.name, c.arguments) for c in message.tool_calls]
    if message.error is None:
        assert got["end"]["error"] is None
    else:
        assert got["end"]["error"]["type"] is not None
    # Seqs only rise, and the end names the last one.
    assert got["seqs"] == sorted(set(got["seqs"]))
    assert all(seq <= max(message.last_seq, 0) for seq in got["seqs"])


@pytest.mark.parametrize("golden", GOLDENS[::4], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_resume_sends_only_what_follows_and_the_same_end(golden: Path) -> None:
    dialect, body = golden.parent.name, body_of(golden)
    whole = fold_normalized(encode(dialect, body)[0], SID)
    if not whole["seqs"]:
        pytest.skip("a body with nothing to show")
    cut = whole["seqs"][len(whole["seqs"]) // 2]
    rest = fold_normalized(encode(dialect, body, after=cut)[0], SID)
    assert rest["seqs"] == [seq for seq in whole["seqs"] if seq > cut]
    assert rest["end"] == whole["end"]


def test_the_exact_bytes_of_a_small_stream() -> None:
    encoder = NormalizedEncoder("ub_x")
    assert encoder.frame(1, [Ping(seq=1)]) == b""
    assert encoder.frame(2, [TextDelta(seq=2, text="你好\n")]) == (
        'event: delta\nid: ub_x:2\ndata: {"text":"你好\\n","status":"streaming"}\n\n'.encode())
    assert encoder.frame(2, [TextDelta(seq=2, text="again")]) == b""  # a duplicate
    assert encoder.frame(3, [ToolCallDelta(seq=3, index=0, id="c1", name="f",
                                           arguments='{"a"')]) == (
        b'event: delta\nid: ub_x:3\ndata: {"tool_calls":[{"index":0,"id":"c1","name":"f",'
        b'"arguments":"{\\"a\\""}]}\n\n')
    assert encoder.frame(4, [Finish(seq=4, status=Status.TRUNCATED, reason=FinishReason.LENGTH,
                                    raw="length")]) == b""
    assert encoder.close() == (
        b'event: end\nid: ub_x:4\ndata: {"status":"truncated","finish_reason":"length",'
        b'"raw_finish_reason":"length","error":null,"frames":4,"chars":3}\n\n')
    with pytest.raises(ValueError, match="already encoded"):
        encoder.end(StreamEnding(status=Status.COMPLETED))
    with pytest.raises(ValueError, match="after the end"):
        encoder.frame(5, [TextDelta(seq=5, text="late")])


def test_an_interrupted_end_carries_the_stored_error_and_the_last_seq() -> None:
    encoder = NormalizedEncoder("ub_y", after=9)
    assert encoder.frame(1, [TextDelta(seq=1, text="ab")]) == b""  # the reader has it
    ending = StreamEnding.of_fields(Status.INTERRUPTED, None, None,
                                    {"type": "IdleTimeout", "message": "no data for 30 s"})
    assert encoder.end(ending) == (
        b'event: end\nid: ub_y:1\ndata: {"status":"interrupted","finish_reason":null,'
        b'"raw_finish_reason":null,"error":{"type":"IdleTimeout","message":"no data for 30 s"},'
        b'"frames":1,"chars":2}\n\n')


def test_an_ending_must_be_an_end_state() -> None:
    with pytest.raises(ValueError, match="'streaming' is not an end state"):
        StreamEnding(status=Status.STREAMING)


@pytest.mark.parametrize(("query", "accept", "wanted"), [
    (None, "", False),
    (None, "text/event-stream", False),
    (None, "text/event-stream; profile=unbroken", True),
    (None, 'application/json, TEXT/EVENT-STREAM;q=0.9; profile="unbroken"', True),
    (None, "text/plain; profile=unbroken", False),
    ("unbroken", "", True),
    ("provider", "text/event-stream; profile=unbroken", False),
])
def test_which_requests_ask_for_the_format(query: str | None, accept: str, wanted: bool) -> None:
    assert asks_for_normalized(query, accept) is wanted


def test_an_unknown_format_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown format 'openai'"):
        asks_for_normalized("openai", "")
