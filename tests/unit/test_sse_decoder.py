"""SSEDecoder beyond the WHATWG cases: nbytes and raw, strict and replace decoding, misuse.

Every multi-read case goes through ``tr`` (whole, byte by byte, split at every point).
"""

from __future__ import annotations

import pytest
from tests.chunkings import SSE_PATHS, sse_paths, sse_state, tr

from unbroken import (
    DecodingError,
    EventTooLargeError,
    LocalProtocolError,
    ServerSentEvent,
    SSEDecoder,
)
from unbroken.framing import DEFAULT_MAX_EVENT_SIZE

BOM = b"\xef\xbb\xbf"


def ev(data: str, raw: bytes, **fields: object) -> ServerSentEvent:
    return ServerSentEvent(data=data, nbytes=len(raw), raw=raw, **fields)  # type: ignore[arg-type]


# -- nbytes and raw -------------------------------------------------------------------------------


def test_nbytes_lf() -> None:
    out = tr(SSEDecoder, b"data: a\n\ndata: bb\n\n", sse_state)
    assert out.frames == (
        ServerSentEvent(data="a", nbytes=9, raw=b"data: a\n\n"),
        ServerSentEvent(data="bb", nbytes=10, raw=b"data: bb\n\n"),
    )
    assert out.state == ("", None, b"")


def test_nbytes_cr() -> None:
    out = tr(SSEDecoder, b"data: a\r\rdata: bb\r\r", sse_state)
    assert out.frames == (
        ServerSentEvent(data="a", nbytes=9, raw=b"data: a\r\r"),
        ServerSentEvent(data="bb", nbytes=10, raw=b"data: bb\r\r"),
    )


def test_nbytes_crlf_counts_the_lf_of_an_event_end_in_the_next_block() -> None:
    # The first event is dispatched on the CR of its blank line (a CR at the end of a read cannot
    # wait for an LF), so that LF belongs to the next block; the very last LF to no block.
    out = tr(SSEDecoder, b"data: a\r\n\r\ndata: bb\r\n\r\n", sse_state)
    assert out.frames == (
        ServerSentEvent(data="a", nbytes=10, raw=b"data: a\r\n\r"),
        ServerSentEvent(data="bb", nbytes=12, raw=b"\ndata: bb\r\n\r"),
    )
    assert out.state == ("", None, b"")


def test_bytes_received_is_the_input_length_under_every_chunking() -> None:
    body = BOM + b"data: a\r\n\r\n: c\n\ndata: b"
    for cut in range(len(body) + 1):
        decoder = SSEDecoder()
        decoder.receive_data(body[:cut])
        assert decoder.bytes_received == cut
        decoder.receive_data(body[cut:])
        assert decoder.bytes_received == len(body) == 3 + 11 + 5 + 7


def test_every_byte_is_accounted_for() -> None:
    # BOM (3) + comment block (6, nothing dispatched) + an event ended by CRLF CR (16)
    # + the next event, which starts with the swallowed LF (19) + an unterminated tail (9).
    body = BOM + b": hi\n\n" + b"id: 1\ndata: a\r\n\r" + b"\nevent: e\ndata: b\n\n" + b"data: cut"
    out = tr(SSEDecoder, body, sse_state)
    assert out.frames == (
        ServerSentEvent(data="a", id="1", block_id="1", nbytes=16, raw=b"id: 1\ndata: a\r\n\r"),
        ServerSentEvent(
            event="e", data="b", id="1", nbytes=19, raw=b"\nevent: e\ndata: b\n\n"
        ),
    )
    assert out.state == ("1", None, b"data: cut")
    assert 3 + 6 + 16 + 19 + len(b"data: cut") == len(body) == 53


def test_raws_of_data_blocks_rebuild_the_body() -> None:
    body = b"data: 1\r\n\r\ndata: \xe4\xbd\xa0\r\n\r\ndata: x\r\ndata: y\r\n\r\ndata: end\r\n"
    out = tr(SSEDecoder, BOM + body, sse_state)
    assert [event.data for event in out.frames] == ["1", "你", "x\ny"]
    # The last event's final LF belongs to the tail, which starts with it and is then swallowed.
    assert b"".join(event.raw for event in out.frames) + b"\n" + out.state[2] == body
    assert out.state[2] == b"data: end\r\n"


def test_a_cr_ending_a_read_dispatches_at_once_and_the_next_lf_is_swallowed() -> None:
    decoder = SSEDecoder()
    assert decoder.receive_data(b"data: a\n\r") == [ev("a", b"data: a\n\r")]
    assert decoder.receive_data(b"\ndata: b\n\n") == [ev("b", b"\ndata: b\n\n")]
    assert decoder.receive_eof() == []
    assert decoder.unterminated == b""


def test_a_lf_after_a_dispatching_cr_is_swallowed_only_once() -> None:
    out = tr(SSEDecoder, b"data: a\r\r\n\ndata: b\n\n", sse_state)
    # CR CR: event a. The LF pairs with the second CR; the next LF is an empty line by itself.
    assert out.frames == (ev("a", b"data: a\r\r"), ev("b", b"data: b\n\n"))


def test_state_is_updated_as_blocks_complete() -> None:
    decoder = SSEDecoder()
    assert decoder.receive_data(b"retry: 300\nid: 7\n\ndata: x\nretry: 5") == []
    assert (decoder.last_event_id, decoder.reconnection_time) == ("7", 300)
    assert decoder.receive_data(b"0\n\n") == [ev("x", b"data: x\nretry: 50\n\n", id="7", retry=50)]
    assert (decoder.last_event_id, decoder.reconnection_time) == ("7", 50)


def test_blocks_of_every_shape_in_one_read_match_the_same_blocks_read_one_by_one() -> None:
    blocks = [
        b"data: plain\n\n",
        b"event: e\ndata: typed\n\n",
        b"data: 1\ndata: 2\n\n",
        b"data:nospace\n\n",
        b": comment\n\n",
        b"\n",
        b"id: 9\ndata: with id\n\n",
        b"data: after\n\n",
    ]
    whole = SSEDecoder().receive_data(b"".join(blocks))
    one_by_one: list[ServerSentEvent] = []
    decoder = SSEDecoder()
    for block in blocks:
        one_by_one += decoder.receive_data(block)
    assert whole == one_by_one
    assert [(e.event, e.data, e.id) for e in whole] == [
        ("message", "plain", ""),
        ("e", "typed", ""),
        ("message", "1\n2", ""),
        ("message", "nospace", ""),
        ("message", "with id", "9"),
        ("message", "after", "9"),
    ]


# -- invalid UTF-8 --------------------------------------------------------------------------------

INVALID = {
    "lone continuation byte": (b"\x80", "\ufffd"),
    "truncated sequence before LF": (b"\xe4\xb8", "\ufffd"),
    "overlong C0 80": (b"\xc0\x80", "\ufffd\ufffd"),
    "encoded surrogate ED A0 80": (b"\xed\xa0\x80", "\ufffd\ufffd\ufffd"),
    "FF": (b"\xff", "\ufffd"),
}


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("bom", [b"", BOM], ids=["no BOM", "BOM"])
@pytest.mark.parametrize("bad", list(INVALID.values()), ids=list(INVALID))
def test_strict_invalid_utf8_in_data(bad: tuple[bytes, str], bom: bytes, path: str) -> None:
    # The bad bytes start at offset 17 of the body (after "data: ok\n\n" and "data: a").
    body = bom + b"data: ok\n\ndata: a" + bad[0] + b"\n\ndata: never\n\n"
    with sse_paths(path):
        out = tr(SSEDecoder, body)
    assert out.error_type is DecodingError
    assert out.error_field("offset") == 17 + len(bom)
    assert out.frames == (ev("ok", b"data: ok\n\n"),)


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("bad", list(INVALID.values()), ids=list(INVALID))
def test_strict_invalid_utf8_in_a_field_name(bad: tuple[bytes, str], path: str) -> None:
    # "id: 1\n" (6) "data: ok" (8) CR LF CR (3) then the swallowed LF (1) and "d" (1): 19.
    body = b"id: 1\ndata: ok\r\n\r\nd" + bad[0] + b"ata: x\ndata: y\n\n"
    with sse_paths(path):
        out = tr(SSEDecoder, body)
    assert out.error_type is DecodingError
    assert out.error_field("offset") == 19
    assert out.frames == (ev("ok", b"id: 1\ndata: ok\r\n\r", id="1", block_id="1"),)


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("name", [b"event", b"id", b"retry", b"data", b"other"])
def test_strict_invalid_utf8_in_a_value_a_later_field_replaces_still_raises(
    name: bytes, path: str
) -> None:
    body = name + b": a\xffb\n" + name + b": 5\ndata: x\n\n"
    with sse_paths(path):
        out = tr(SSEDecoder, body)
    assert (out.error_type, out.error_field("offset"), out.frames) == (
        DecodingError,
        len(name) + 3,
        (),
    )


def test_strict_invalid_utf8_in_a_comment_still_raises() -> None:
    out = tr(SSEDecoder, b": caf\xe9\ndata: x\n\n")
    assert (out.error_type, out.error_field("offset"), out.frames) == (DecodingError, 5, ())


def test_err_events_hold_the_events_completed_earlier_in_the_same_call() -> None:
    decoder = SSEDecoder()
    assert decoder.receive_data(b"data: first\n\n") == [ev("first", b"data: first\n\n")]
    with pytest.raises(DecodingError) as info:
        decoder.receive_data(b"data: a\n\nevent: e\ndata: b\n\ndata: \xff\n\ndata: c\n\n")
    assert info.value.events == [
        ev("a", b"data: a\n\n"),
        ev("b", b"event: e\ndata: b\n\n", event="e"),
    ]
    assert info.value.offset == 13 + 9 + 18 + 6
    assert str(info.value) == "invalid UTF-8 at stream byte offset 46: invalid start byte"
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(b"")
    with pytest.raises(LocalProtocolError):
        decoder.receive_eof()


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("bad", list(INVALID.values()), ids=list(INVALID))
def test_replace_substitutes_like_a_browser(bad: tuple[bytes, str], path: str) -> None:
    body = b"data: a" + bad[0] + b"b\n\nd" + bad[0] + b"ata: ignored\n\ndata: z\n\n"
    with sse_paths(path):
        out = tr(lambda: SSEDecoder(errors="replace"), body)
    assert out.error is None
    assert [event.data for event in out.frames] == ["a" + bad[1] + "b", "z"]
    assert [event.nbytes for event in out.frames] == [10 + len(bad[0]), 9]


def test_invalid_utf8_in_a_discarded_tail_is_not_an_error() -> None:
    # The spec discards an unterminated event at EOF without decoding it into anything.
    out = tr(SSEDecoder, b"data: ok\n\ndata: \xff", sse_state)
    assert out.error is None
    assert out.frames == (ev("ok", b"data: ok\n\n"),)
    assert out.state == ("", None, b"data: \xff")


# -- the size cap -------------------------------------------------------------------------------


def test_default_max_event_size_is_16_mib() -> None:
    assert DEFAULT_MAX_EVENT_SIZE == 16 * 2**20


@pytest.mark.parametrize(
    ("body", "limit", "offset", "data"),
    [
        (b"data: ok\n\ndata: 0123456789\n\n", 17, 10, ["ok"]),  # complete, 18 bytes
        (b"data: ok\n\ndata: 0123456789", 15, 10, ["ok"]),  # still growing
        (b"data: ok\r\n\r\ndata: 01234567\r\n\r\n", 17, 11, ["ok"]),  # LF + 14 + CR LF CR
        (b"data: ok\n\n: a comment that is far too long\n\n", 20, 10, ["ok"]),
    ],
)
def test_an_event_over_the_limit_raises(
    body: bytes, limit: int, offset: int, data: list[str]
) -> None:
    out = tr(lambda: SSEDecoder(max_event_size=limit), body)
    assert out.error_type is EventTooLargeError
    assert (out.error_field("limit"), out.error_field("offset")) == (limit, offset)
    assert [event.data for event in out.frames] == data


def test_an_event_of_exactly_the_limit_passes() -> None:
    out = tr(lambda: SSEDecoder(max_event_size=13), b"data: 01234\n\ndata: 01234\n\n")
    assert out.error is None
    assert [event.nbytes for event in out.frames] == [13, 13]


# -- misuse -------------------------------------------------------------------------------------


def test_data_after_eof_is_a_local_protocol_error() -> None:
    decoder = SSEDecoder()
    decoder.receive_data(b"data: x\n\n")
    assert decoder.receive_eof() == []
    with pytest.raises(LocalProtocolError, match="after the decoder eof"):
        decoder.receive_data(b"data: y\n\n")
    with pytest.raises(LocalProtocolError, match="after the decoder eof"):
        decoder.receive_data(b"")


def test_eof_twice_is_a_local_protocol_error() -> None:
    decoder = SSEDecoder()
    decoder.receive_eof()
    with pytest.raises(LocalProtocolError, match="receive_eof"):
        decoder.receive_eof()


def test_local_protocol_error_is_not_a_stream_error() -> None:
    from unbroken import StreamError

    assert not issubclass(LocalProtocolError, StreamError)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"errors": "ignore"}, "errors must be 'strict' or 'replace', not 'ignore'"),
        ({"max_event_size": 0}, "max_event_size must be positive"),
    ],
)
def test_constructor_rejects_bad_options(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        SSEDecoder(**kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_bytes_like_reads_decode_like_bytes() -> None:
    body = b"data: \xe4\xbd\xa0\n\ndata: x\r\n\r\n"
    expected = SSEDecoder().receive_data(body)
    for read in (bytearray(body), memoryview(body)):
        assert SSEDecoder().receive_data(read) == expected  # type: ignore[arg-type]
    assert [event.data for event in expected] == ["你", "x"]


def test_empty_reads_change_nothing() -> None:
    decoder = SSEDecoder()
    assert decoder.receive_data(b"") == []
    assert decoder.receive_data(b"\xef") == []
    assert decoder.receive_data(b"") == []
    assert decoder.receive_data(b"\xbb\xbfdata: x\n\n") == [ev("x", b"data: x\n\n")]
    assert decoder.bytes_received == 12


def test_initial_last_event_id_is_reported_before_any_id() -> None:
    decoder = SSEDecoder(last_event_id="seq-41")
    assert decoder.last_event_id == "seq-41"
    assert decoder.receive_data(b"data: x\n\n") == [ev("x", b"data: x\n\n", id="seq-41")]
