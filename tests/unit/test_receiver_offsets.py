"""Where a frame whose payload a dialect refused starts: ``PayloadError.offset`` counts every
byte of the earlier reads, keep-alive blocks included (they carry no frame)."""

from __future__ import annotations

import json

import pytest

from unbroken._receiver import StreamReceiver
from unbroken.errors import PayloadError
from unbroken.finish import Status

CHUNK = json.dumps({"id": "c", "object": "chat.completion.chunk", "choices": [
    {"index": 0, "delta": {"content": "你好"}, "finish_reason": None}]})
GOOD = f"data: {CHUNK}\n\n".encode()
BAD = b"data: {not json\n\n"


@pytest.mark.parametrize("keepalive", [b": keep-alive\n\n", b":\n\n: ping\n\n", b"\n\n"],
                         ids=["comment", "two-comments", "blank-lines"])
def test_keepalives_in_earlier_reads_are_counted(keepalive: bytes) -> None:
    receiver = StreamReceiver("openai-chat")
    reads = [GOOD, keepalive, GOOD + keepalive, BAD]
    for read in reads:
        receiver.receive_data(read)
    message = receiver.message
    assert (message.status, message.text) == (Status.FAILED, "你好你好")
    error = message.error
    assert isinstance(error, PayloadError)
    assert (error.line, error.offset) == (3, len(b"".join(reads[:3])))


def test_ndjson_blank_lines_in_earlier_reads_are_counted() -> None:
    line = json.dumps({"model": "m", "message": {"role": "assistant", "content": "a"},
                       "done": False}).encode() + b"\n"
    receiver = StreamReceiver("ollama")
    reads = [line, b"\n\n", line, b"[1, 2]\n"]  # JSON, but not an object: the dialect refuses
    for read in reads:
        receiver.receive_data(read)
    error = receiver.message.error
    assert isinstance(error, PayloadError)
    assert (error.line, error.offset) == (5, len(b"".join(reads[:3])))


def test_frames_of_the_same_read_before_it_are_counted() -> None:
    receiver = StreamReceiver("openai-chat")
    receiver.receive_data(GOOD + GOOD + BAD)
    error = receiver.message.error
    assert isinstance(error, PayloadError)
    assert error.offset == 2 * len(GOOD)
