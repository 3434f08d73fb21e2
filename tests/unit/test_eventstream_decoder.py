"""``EventStreamDecoder``: the checks AWS's event-stream specification asks for, one by one.

Messages are built here with raw header bytes so that each bad case is exactly one flaw; the
well-formed encodings of an independent encoder are in tests/conformance/eventstream/.
"""

from __future__ import annotations

import tracemalloc
import zlib

import pytest
from tests.chunkings import tr

from unbroken.errors import DecodingError, EventTooLargeError, LocalProtocolError
from unbroken.framing import EventStreamDecoder, EventStreamMessage


def message(headers: bytes = b"", payload: bytes = b"", *, total: int | None = None,
            headers_length: int | None = None) -> bytes:
    size = 16 + len(headers) + len(payload) if total is None else total
    prelude = size.to_bytes(4, "big") + (
        len(headers) if headers_length is None else headers_length
    ).to_bytes(4, "big")
    body = prelude + zlib.crc32(prelude).to_bytes(4, "big") + headers + payload
    return body + zlib.crc32(body).to_bytes(4, "big")


def string_header(name: bytes, value: bytes) -> bytes:
    return bytes([len(name)]) + name + b"\x07" + len(value).to_bytes(2, "big") + value


EVENT = message(
    string_header(b":event-type", b"contentBlockDelta"), b'{"delta":{"text":"\xe4\xbd\xa0"}}'
)


def test_a_message_and_its_fields() -> None:
    out = tr(EventStreamDecoder, EVENT + EVENT)
    first = EventStreamMessage(
        {":event-type": "contentBlockDelta"}, b'{"delta":{"text":"\xe4\xbd\xa0"}}', len(EVENT),
        EVENT,
    )
    assert out.frames == (first, first)
    assert first.event == "contentBlockDelta"


def test_exception_type_names_the_event() -> None:
    raw = message(string_header(b":exception-type", b"throttlingException"))
    [decoded] = EventStreamDecoder().receive_data(raw)
    assert decoded.event == "throttlingException"
    assert EventStreamDecoder().receive_data(message())[0].event is None


@pytest.mark.parametrize(
    ("total", "headers_length", "why"),
    [(15, 0, "total 15"), (16, 1, "headers 1"), (40, 30, "headers 30")],
)
def test_impossible_lengths(total: int, headers_length: int, why: str) -> None:
    bad = message(total=total, headers_length=headers_length)[:12] + b"\x00" * 40
    out = tr(EventStreamDecoder, EVENT + bad)
    assert out.error_type is DecodingError
    assert out.error_field("offset") == len(EVENT)
    assert out.frames[0].raw == EVENT
    with pytest.raises(DecodingError, match=f"impossible lengths.*{why}"):
        EventStreamDecoder().receive_data(bad)


def test_a_message_too_large_is_refused_at_its_prelude() -> None:
    # The prelude claims 1 GiB: refused after 12 bytes, with no gigabyte ever buffered.
    prelude = (2**30).to_bytes(4, "big") + (0).to_bytes(4, "big")
    prelude += zlib.crc32(prelude).to_bytes(4, "big")
    decoder = EventStreamDecoder(max_event_size=1024)
    tracemalloc.start()
    try:
        with pytest.raises(EventTooLargeError) as caught:
            decoder.receive_data(prelude)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (caught.value.limit, caught.value.offset) == (1024, 0)
    assert peak < 64 * 1024
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(b"x")


def test_the_limit_counts_the_whole_message() -> None:
    assert EventStreamDecoder(max_event_size=len(EVENT)).receive_data(EVENT)[0].raw == EVENT
    with pytest.raises(EventTooLargeError):
        EventStreamDecoder(max_event_size=len(EVENT) - 1).receive_data(EVENT)
    with pytest.raises(ValueError, match="at least 16"):
        EventStreamDecoder(max_event_size=15)


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        (b"\x01a\x0a", "unknown header value type 10"),
        (b"\x01a\x07\x00\x09abc", "runs past"),  # a string longer than the section
        (b"\x01a\x04\x00\x00", "runs past"),  # an integer cut short
        (b"\x05ab", "runs past"),  # a name longer than the section
        (b"\x01a\x07\x00\x02\xff\xfe", "unreadable header"),  # a string that is not UTF-8
        (b"\x02\xff\xfe\x00", "unreadable header"),  # a name that is not UTF-8
        (b"\x01a\x00\x01a\x01", "given twice"),
    ],
)
def test_bad_headers(headers: bytes, why: str) -> None:
    out = tr(EventStreamDecoder, EVENT + message(headers, b"{}"))
    assert out.error_type is DecodingError
    assert out.error_field("offset") == len(EVENT)
    with pytest.raises(DecodingError, match=why):
        EventStreamDecoder().receive_data(message(headers, b"{}"))


def test_a_message_cut_by_eof_is_no_frame_but_evidence() -> None:
    cut = EVENT + EVENT[:-5]
    decoder = EventStreamDecoder()
    frames = decoder.receive_data(cut)
    assert [frame.raw for frame in frames] == [EVENT]
    assert decoder.unterminated == b""  # still waiting
    assert decoder.receive_eof() == []
    assert (decoder.unterminated, decoder.bytes_dispatched) == (EVENT[:-5], len(EVENT))
    with pytest.raises(LocalProtocolError):
        decoder.receive_eof()


def test_empty_reads_and_a_body_of_nothing() -> None:
    decoder = EventStreamDecoder()
    assert decoder.receive_data(b"") == []
    assert decoder.receive_eof() == []
    assert decoder.unterminated == b""
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(EVENT)
