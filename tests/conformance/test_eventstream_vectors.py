"""AWS's event-stream test vectors (``eventstream/aws_vectors.json``): each message whole, byte by
byte and split at every point gives the same headers and payload; all of them in one body too;
each corrupted message fails with ``DecodingError`` at the offset of the message it is in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.chunkings import tr

from unbroken.errors import DecodingError
from unbroken.framing import EventStreamDecoder, EventStreamMessage

DATA = json.loads((Path(__file__).parent / "eventstream" / "aws_vectors.json").read_text())
MESSAGES: dict[str, Any] = DATA["messages"]
BAD: dict[str, Any] = DATA["bad"]


def _value(kind: str, value: Any) -> Any:
    return bytes.fromhex(value) if kind == "bytes" else value


def expected(case: dict[str, Any]) -> EventStreamMessage:
    raw = bytes.fromhex(case["hex"])
    headers = {name: _value(*typed) for name, typed in case["headers"].items()}
    return EventStreamMessage(headers, bytes.fromhex(case["payload_hex"]), len(raw), raw)


def state(decoder: EventStreamDecoder) -> tuple[int, int, bytes]:
    return (decoder.bytes_received, decoder.bytes_dispatched, decoder.unterminated)


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_message(name: str) -> None:
    message = expected(MESSAGES[name])
    out = tr(EventStreamDecoder, message.raw, state)
    assert out.error is None
    assert out.frames == (message,)
    assert [type(value) for value in out.frames[0].headers.values()] == [
        type(value) for value in message.headers.values()
    ]  # bool stays bool, not the int 1 or 0
    assert out.state == (message.nbytes, message.nbytes, b"")


def test_all_messages_in_one_body() -> None:
    messages = [expected(MESSAGES[name]) for name in sorted(MESSAGES)]
    body = b"".join(message.raw for message in messages)
    decoder = EventStreamDecoder()
    got = [m for i in range(0, len(body), 7) for m in decoder.receive_data(body[i : i + 7])]
    assert got == messages
    assert decoder.receive_eof() == []
    assert decoder.unterminated == b""


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_message_after_a_good_one(name: str) -> None:
    good = expected(MESSAGES["payload_one_str_header"])
    body = good.raw + bytes.fromhex(BAD[name]["hex"])
    out = tr(EventStreamDecoder, body)
    assert out.error_type is DecodingError
    assert out.error_field("offset") == good.nbytes  # where the bad message starts
    assert out.frames == (good,)  # the good message is not lost
    decoder = EventStreamDecoder()
    with pytest.raises(DecodingError, match=BAD[name]["error"]):
        decoder.receive_data(body)
