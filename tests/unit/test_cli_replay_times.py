"""``unbroken replay`` on a capture with a real stall (longer than the stall threshold): the same
message under every split, and a re-cut keeps each piece's receive time (the time of the read
that held its last byte)."""

from __future__ import annotations

import json

import pytest

from unbroken.cli.replay import SPLITS, message_summary, resplit
from unbroken.client.capture import Capture, CaptureConnection, replay_capture

FRAMES = [
    b'data: {"choices":[{"index":0,"delta":{"content":"caf\xc3\xa9 "},"finish_reason":null}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":"au lait"},"finish_reason":null}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
]


def stalled_capture() -> Capture:
    """Three reads; 20.5 s pass between the first and the second (past the 10 s threshold)."""
    reads = [(0.25, FRAMES[0]), (20.75, FRAMES[1]), (20.875, FRAMES[2])]
    return Capture(method="POST", url="/v1/chat/completions", dialect="openai-chat",
                   started=0.0, end="eof", error=None,
                   connections=[CaptureConnection(number=1, kind="first", status=200,
                                                  headers={}, reads=reads)])


@pytest.mark.parametrize("split", SPLITS)
def test_a_stall_survives_every_split(split: str) -> None:
    original = replay_capture(stalled_capture())
    assert [(w.code, w.detail) for w in original.trace.warnings] == [
        ("stall", "no frame for 20.5 s (from t=0.250)")]
    again = resplit(stalled_capture(), split, seed=3)
    assert b"".join(b for _, b in again.connections[0].reads) == b"".join(FRAMES)
    replayed = replay_capture(again)
    assert json.dumps(message_summary(replayed)) == json.dumps(message_summary(original))
    assert replayed.text == "café au lait"
    times = [frame.t for frame in replayed.trace.frames]
    if split == "whole":  # one read, at the time of the last byte
        assert times == [20.875] * 4
    elif split == "bytes":  # no piece spans two reads: every frame keeps its time
        assert times == [0.25, 20.75, 20.875, 20.875]
        assert [w.code for w in replayed.trace.warnings] == ["stall"]


def test_a_piece_that_joins_reads_takes_the_time_of_its_last_byte() -> None:
    capture = stalled_capture()
    pieces = resplit(capture, "random", seed=3).connections[0].reads
    ends = [len(FRAMES[0]), len(FRAMES[0]) + len(FRAMES[1])]
    offset = 0
    for t, piece in pieces:
        offset += len(piece)
        assert t == (0.25 if offset <= ends[0] else 20.75 if offset <= ends[1] else 20.875)
