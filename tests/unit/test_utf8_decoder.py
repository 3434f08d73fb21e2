"""Utf8Decoder: whole characters only, the incomplete tail held, exact errors across reads."""

from __future__ import annotations

import pytest
from tests.chunkings import tr

from unbroken import DecodingError, LocalProtocolError, TruncatedError, Utf8Decoder

TEXT = "Hi 你好\uff0c世界 😀🚀 naïve 한국어 €\u2028z"


def test_every_chunking_joins_to_the_text() -> None:
    out = tr(Utf8Decoder, TEXT.encode())
    assert (out.text, out.error) == (TEXT, None)


def test_each_read_returns_exactly_the_whole_characters_received() -> None:
    data = TEXT.encode()
    boundaries = {len(TEXT[:i].encode()) for i in range(len(TEXT) + 1)}
    for cut in range(len(data) + 1):
        decoder = Utf8Decoder()
        first = decoder.receive_data(data[:cut])
        whole = max(b for b in boundaries if b <= cut)
        assert first == data[:whole].decode()
        assert decoder.pending == data[whole:cut]
        assert first + decoder.receive_data(data[cut:]) + decoder.receive_eof() == TEXT


def test_a_truncated_tail_at_eof_is_a_truncated_error() -> None:
    out = tr(Utf8Decoder, "ok 😀".encode()[:-1])
    assert out.text == "ok "
    assert (out.error_type, out.error_field("tail")) == (TruncatedError, b"\xf0\x9f\x98")


def test_truncated_error_message() -> None:
    decoder = Utf8Decoder()
    assert decoder.receive_data(b"a\xe4") == "a"
    with pytest.raises(TruncatedError) as info:
        decoder.receive_eof()
    assert str(info.value) == "stream ended inside a UTF-8 character (1 of its bytes received)"
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(b"\xbd\xa0")


INVALID = {
    "lone continuation byte": b"\x80",
    "truncated sequence before LF": b"\xe4\xb8\n",
    "overlong C0 80": b"\xc0\x80",
    "encoded surrogate ED A0 80": b"\xed\xa0\x80",
    "FF": b"\xff",
}


@pytest.mark.parametrize("bad", list(INVALID.values()), ids=list(INVALID))
def test_invalid_bytes_raise_at_their_stream_offset(bad: bytes) -> None:
    # "你好" is 6 bytes: the bad sequence starts at offset 6 under every chunking.
    out = tr(Utf8Decoder, "你好".encode() + bad + b"tail")
    assert (out.error_type, out.error_field("offset")) == (DecodingError, 6)
    assert out.text == "你好"  # returned earlier, or carried on the error: never lost


def test_the_offset_counts_bytes_held_from_an_earlier_read() -> None:
    decoder = Utf8Decoder()
    assert decoder.receive_data(b"abc") == "abc"
    assert decoder.receive_data(b"\xe4") == ""
    assert decoder.receive_data(b"\xb8") == ""
    with pytest.raises(DecodingError) as info:
        decoder.receive_data(b"X")
    assert (info.value.offset, info.value.events) == (3, [])
    assert str(info.value) == "invalid UTF-8 at stream byte offset 3: invalid continuation byte"


def test_text_before_the_bad_byte_in_the_same_read_is_on_the_error() -> None:
    decoder = Utf8Decoder()
    assert decoder.receive_data(b"ab\xe4") == "ab"
    with pytest.raises(DecodingError) as info:
        decoder.receive_data(b"\xbd\xa0cd\xffef")
    assert (info.value.offset, info.value.events) == (7, ["你cd"])


def test_misuse_after_eof() -> None:
    decoder = Utf8Decoder()
    assert decoder.receive_data(b"") == ""
    assert decoder.receive_eof() == ""
    with pytest.raises(LocalProtocolError, match="after the decoder eof"):
        decoder.receive_data(b"x")
    with pytest.raises(LocalProtocolError, match="after the decoder eof"):
        decoder.receive_eof()
