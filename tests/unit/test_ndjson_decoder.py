"""NDJSONDecoder: one JSON value per line, under every chunking (``tr``), with exact errors."""

from __future__ import annotations

import json

import pytest
from tests.chunkings import tr

import unbroken.framing._ndjson
from unbroken import (
    DecodingError,
    EventTooLargeError,
    JSONLine,
    LocalProtocolError,
    NDJSONDecoder,
    PayloadError,
)


def ndjson_state(decoder: NDJSONDecoder) -> tuple[int, bytes]:
    return (decoder.bytes_received, decoder.unterminated)


@pytest.fixture(params=["orjson", "json"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with orjson (installed here) and with the standard library's json."""
    if request.param == "json":
        monkeypatch.setattr(unbroken.framing._ndjson, "loads", json.loads)
        monkeypatch.setattr(unbroken.framing._ndjson, "_LOADS_BYTES", False)
    return str(request.param)


def test_lines(backend: str) -> None:
    body = b'{"a":1}\n{"b":[2,"\xe4\xbd\xa0"]}\nnull\n"s"\n'
    out = tr(NDJSONDecoder, body, ndjson_state)
    assert out.error is None
    assert out.frames == (
        JSONLine({"a": 1}, 1, 8, b'{"a":1}\n'),
        JSONLine({"b": [2, "你"]}, 2, 16, b'{"b":[2,"\xe4\xbd\xa0"]}\n'),
        JSONLine(None, 3, 5, b"null\n"),
        JSONLine("s", 4, 4, b'"s"\n'),
    )
    assert out.state == (len(body), b"")


def test_crlf_and_blank_lines_are_tolerated(backend: str) -> None:
    body = b'{"a":1}\r\n\r\n\n \t \n{"b":2}\r\n'
    out = tr(NDJSONDecoder, body, ndjson_state)
    assert out.frames == (
        JSONLine({"a": 1}, 1, 9, b'{"a":1}\r\n'),
        JSONLine({"b": 2}, 5, 9, b'{"b":2}\r\n'),  # blank lines still count as lines
    )


def test_a_final_line_without_lf_is_a_value_at_eof(backend: str) -> None:
    out = tr(NDJSONDecoder, b'{"a":1}\n{"done":true}', ndjson_state)
    assert out.frames == (
        JSONLine({"a": 1}, 1, 8, b'{"a":1}\n'),
        JSONLine({"done": True}, 2, 13, b'{"done":true}'),
    )
    decoder = NDJSONDecoder()
    first = decoder.receive_data(b'{"a":1}\n{"done":true}')
    assert first == [JSONLine({"a": 1}, 1, 8, b'{"a":1}\n')]
    assert decoder.receive_eof() == [JSONLine({"done": True}, 2, 13, b'{"done":true}')]


def test_malformed_json_is_a_payload_error_with_line_and_offset(backend: str) -> None:
    out = tr(NDJSONDecoder, b'{"a":1}\n\n{"b":\n{"c":3}\n')
    assert out.error_type is PayloadError
    assert (out.error_field("line"), out.error_field("offset")) == (3, 9)
    assert out.frames == (JSONLine({"a": 1}, 1, 8, b'{"a":1}\n'),)


def test_payload_error_message_and_events_of_the_same_read() -> None:
    decoder = NDJSONDecoder()
    with pytest.raises(PayloadError) as info:
        decoder.receive_data(b'1\n2\n{"x": nope}\n4\n')
    assert info.value.events == [JSONLine(1, 1, 2, b"1\n"), JSONLine(2, 2, 2, b"2\n")]
    assert str(info.value).startswith("malformed JSON on line 3 at byte offset 4: ")
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(b"5\n")
    with pytest.raises(LocalProtocolError):
        decoder.receive_eof()


def test_malformed_final_line_at_eof(backend: str) -> None:
    out = tr(NDJSONDecoder, b'{"a":1}\n{"b":')
    assert out.error_type is PayloadError
    assert (out.error_field("line"), out.error_field("offset")) == (2, 8)


def test_a_lone_cr_is_not_a_line_end(backend: str) -> None:
    out = tr(NDJSONDecoder, b'{"a":1}\r{"b":2}\n')
    assert (out.error_type, out.error_field("line"), out.error_field("offset")) == (
        PayloadError,
        1,
        0,
    )


INVALID = {
    "lone continuation byte": b"\x80",
    "truncated sequence": b"\xe4\xb8",
    "overlong C0 80": b"\xc0\x80",
    "encoded surrogate ED A0 80": b"\xed\xa0\x80",
    "FF": b"\xff",
}


@pytest.mark.parametrize("bad", list(INVALID.values()), ids=list(INVALID))
def test_invalid_utf8_is_a_decoding_error_at_its_offset(bad: bytes, backend: str) -> None:
    # Line 2 starts at 8; two blanks and '{"s":"' put the bad bytes at 8 + 2 + 6 = 16.
    body = b'{"a":1}\n  {"s":"' + bad + b'"}\n{"c":3}\n'
    out = tr(NDJSONDecoder, body)
    assert out.error_type is DecodingError
    assert out.error_field("offset") == 16
    assert out.frames == (JSONLine({"a": 1}, 1, 8, b'{"a":1}\n'),)


def test_utf16_looking_bytes_are_not_sniffed(backend: str) -> None:
    # json.loads(bytes) would read these as UTF-16 and return 1; they are a NUL in a JSON line.
    out = tr(NDJSONDecoder, b"1\x00\n")
    assert (out.error_type, out.error_field("line"), out.error_field("offset")) == (
        PayloadError,
        1,
        0,
    )


def test_an_oversize_line_raises_before_it_is_complete() -> None:
    body = b'{"a":1}\n' + b'"' + b"x" * 30 + b'"\n'
    out = tr(lambda: NDJSONDecoder(max_event_size=16), body)
    assert out.error_type is EventTooLargeError
    assert (out.error_field("limit"), out.error_field("offset")) == (16, 8)
    assert out.frames == (JSONLine({"a": 1}, 1, 8, b'{"a":1}\n'),)


def test_a_line_of_exactly_the_limit_passes() -> None:
    body = b'"0123456789abc"\n' + b'"0123456789abc"'  # 16 bytes with its LF, 15 without
    out = tr(lambda: NDJSONDecoder(max_event_size=16), body)
    assert out.error is None
    assert [(line.value, line.nbytes) for line in out.frames] == [
        ("0123456789abc", 16),
        ("0123456789abc", 15),
    ]
    out = tr(lambda: NDJSONDecoder(max_event_size=15), body)
    assert (out.error_type, out.error_field("offset"), out.frames) == (EventTooLargeError, 0, ())


def test_misuse_after_eof() -> None:
    decoder = NDJSONDecoder()
    assert decoder.receive_eof() == []
    with pytest.raises(LocalProtocolError, match="after the decoder eof"):
        decoder.receive_data(b"1\n")
    with pytest.raises(LocalProtocolError, match="after the decoder eof"):
        decoder.receive_eof()


def test_constructor_rejects_a_non_positive_limit() -> None:
    with pytest.raises(ValueError, match="max_event_size must be positive"):
        NDJSONDecoder(max_event_size=0)


def test_a_final_line_cut_inside_its_value_is_the_unterminated_tail(backend: str) -> None:
    out = tr(NDJSONDecoder, b'{"a":1}\n {"b": "\xe4\xbd', ndjson_state)
    assert out.frames == (JSONLine({"a": 1}, 1, 8, b'{"a":1}\n'),)
    assert out.error_type in (PayloadError, DecodingError)
    assert out.state == (8 + 10, b"{\"b\": \"\xe4\xbd")


def test_a_final_line_that_parses_leaves_no_unterminated_tail(backend: str) -> None:
    decoder = NDJSONDecoder()
    assert decoder.receive_data(b'{"a":1}\n{"b":2}') == [JSONLine({"a": 1}, 1, 8, b'{"a":1}\n')]
    assert decoder.unterminated == b""
    assert decoder.receive_eof() == [JSONLine({"b": 2}, 2, 7, b'{"b":2}')]
    assert decoder.unterminated == b""
