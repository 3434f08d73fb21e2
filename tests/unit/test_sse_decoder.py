"""SSEDecoder beyond the WHATWG cases: nbytes and raw, strict and replace decoding, misuse.

Every multi-read case goes through ``tr`` (whole, byte by byte, split at every point).
"""

from __future__ import annotations

import pytest
from tests.chunkings import (
    SSE_PATHS,
    exact,
    sse_decoder,
    sse_paths,
    sse_state,
    sse_stream_state,
    tr,
)

from unbroken import (
    DecodingError,
    EventTooLargeError,
    LocalProtocolError,
    ServerSentEvent,
)
from unbroken.framing import DEFAULT_MAX_EVENT_SIZE

BOM = b"\xef\xbb\xbf"


def ev(data: str, raw: bytes, **fields: object) -> ServerSentEvent:
    return ServerSentEvent(data=data, nbytes=len(raw), raw=raw, **fields)  # type: ignore[arg-type]


# -- nbytes and raw -------------------------------------------------------------------------------


def test_nbytes_lf() -> None:
    out = tr(sse_decoder, b"data: a\n\ndata: bb\n\n", sse_state)
    assert out.frames == (
        ServerSentEvent(data="a", nbytes=9, raw=b"data: a\n\n"),
        ServerSentEvent(data="bb", nbytes=10, raw=b"data: bb\n\n"),
    )
    assert out.state == ("", None, b"")


def test_nbytes_cr() -> None:
    out = tr(sse_decoder, b"data: a\r\rdata: bb\r\r", sse_state)
    assert out.frames == (
        ServerSentEvent(data="a", nbytes=9, raw=b"data: a\r\r"),
        ServerSentEvent(data="bb", nbytes=10, raw=b"data: bb\r\r"),
    )


def test_nbytes_crlf_covers_the_whole_crlf_of_the_blank_line() -> None:
    # A block that ends in LF CR takes the LF after its CR: 11 + 12 bytes, the whole body.
    body = b"data: a\r\n\r\ndata: bb\r\n\r\n"
    out = tr(sse_decoder, body, sse_stream_state)
    assert exact(out.frames) == [
        tuple(ServerSentEvent(data="a", nbytes=11, raw=b"data: a\r\n\r\n")),
        tuple(ServerSentEvent(data="bb", nbytes=12, raw=b"data: bb\r\n\r\n")),
    ]
    assert 11 + 12 == len(body) == out.state[3]
    assert out.state == ("", None, b"", 23)


def test_two_crlf_events_of_11_bytes_are_22_bytes() -> None:
    body = b"data: a\r\n\r\n" * 2
    out = tr(sse_decoder, body, sse_state)
    assert exact(out.frames) == [tuple(ev("a", b"data: a\r\n\r\n"))] * 2
    assert [event.nbytes for event in out.frames] == [11, 11]
    assert sum(event.nbytes for event in out.frames) == 22 == len(body)


def test_bytes_received_is_the_input_length_under_every_chunking() -> None:
    body = BOM + b"data: a\r\n\r\n: c\n\ndata: b"
    for cut in range(len(body) + 1):
        decoder = sse_decoder()
        decoder.receive_data(body[:cut])
        assert decoder.bytes_received == cut
        decoder.receive_data(body[cut:])
        assert decoder.bytes_received == len(body) == 3 + 11 + 5 + 7


def test_every_byte_is_accounted_for() -> None:
    # BOM (3) + comment block (6, nothing dispatched) + an event ended by CRLF CRLF (17)
    # + the next event (18) + an unterminated tail (9).
    body = BOM + b": hi\n\n" + b"id: 1\ndata: a\r\n\r\n" + b"event: e\ndata: b\n\n" + b"data: cut"
    out = tr(sse_decoder, body, sse_state)
    assert exact(out.frames) == [
        tuple(ev("a", b"id: 1\ndata: a\r\n\r\n", id="1", block_id="1")),
        tuple(ev("b", b"event: e\ndata: b\n\n", event="e", id="1")),
    ]
    assert [event.nbytes for event in out.frames] == [17, 18]
    assert out.state == ("1", None, b"data: cut")
    assert 3 + 6 + 17 + 18 + len(b"data: cut") == len(body) == 53


def test_raws_of_data_blocks_rebuild_the_body() -> None:
    body = b"data: 1\r\n\r\ndata: \xe4\xbd\xa0\r\n\r\ndata: x\r\ndata: y\r\n\r\ndata: end\r\n"
    out = tr(sse_decoder, BOM + body, sse_state)
    assert [event.data for event in out.frames] == ["1", "你", "x\ny"]
    assert b"".join(event.raw for event in out.frames) + out.state[2] == body
    assert out.state[2] == b"data: end\r\n"


# -- a block held at its CR ---------------------------------------------------------------------


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("first", [b"data: a\n\r", b"data: a\r\n\r"], ids=["LF CR", "CRLF CR"])
def test_a_read_ending_at_the_cr_after_an_lf_holds_the_event_until_an_lf_comes(
    first: bytes, path: str
) -> None:
    with sse_paths(path):
        decoder = sse_decoder()
        assert decoder.receive_data(b"data: 0\n\n" + first) == [ev("0", b"data: 0\n\n")]
        assert decoder.bytes_received == 9 + len(first)
        assert decoder.receive_data(b"") == []  # an empty read shows nothing: still held
        assert exact(decoder.receive_data(b"\ndata: b\n\n")) == [
            tuple(ev("a", first + b"\n")),
            tuple(ev("b", b"data: b\n\n")),
        ]
        assert decoder.receive_eof() == []
        assert decoder.unterminated == b""
        assert decoder.bytes_received == 9 + len(first) + 10


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("more", [b"\n", b"\ndata: b", b"\ndata: b\r\n\r"])
def test_a_held_event_is_dispatched_by_a_read_that_starts_with_its_lf(
    more: bytes, path: str
) -> None:
    with sse_paths(path):
        decoder = sse_decoder()
        assert decoder.receive_data(b"id: 7\r\ndata: a\r\n\r") == []
        assert decoder.last_event_id == ""  # the block takes effect when it is dispatched
        assert exact(decoder.receive_data(more)) == [
            tuple(ev("a", b"id: 7\r\ndata: a\r\n\r\n", id="7", block_id="7"))
        ]
        assert decoder.last_event_id == "7"
        # A second held block (the read ends at its CR) waits in turn; EOF dispatches it.
        held = [tuple(ev("b", b"data: b\r\n\r", id="7"))] if more.endswith(b"\r") else []
        assert exact(decoder.receive_eof()) == held
        assert decoder.unterminated == (b"data: b" if more == b"\ndata: b" else b"")


@pytest.mark.parametrize("path", SSE_PATHS)
def test_a_held_event_is_dispatched_without_an_lf_by_a_read_that_starts_otherwise(
    path: str,
) -> None:
    with sse_paths(path):
        decoder = sse_decoder()
        assert decoder.receive_data(b"data: a\r\n\r") == []
        # No LF after the CR: the block ends there, and "data: b" starts the next one.
        assert exact(decoder.receive_data(b"data: b\n\n")) == [
            tuple(ev("a", b"data: a\r\n\r")),
            tuple(ev("b", b"data: b\n\n")),
        ]
        decoder = sse_decoder()
        assert decoder.receive_data(b"data: a\r\n\r") == []
        # A CR: the held block ends at its CR; the CR is a blank line by itself.
        assert exact(decoder.receive_data(b"\r")) == [tuple(ev("a", b"data: a\r\n\r"))]
        assert exact(decoder.receive_data(b"\ndata: c\r\r")) == [
            tuple(ev("c", b"\ndata: c\r\r"))  # the LF of that CR LF is swallowed
        ]


@pytest.mark.parametrize("path", SSE_PATHS)
def test_receive_eof_dispatches_a_held_event(path: str) -> None:
    with sse_paths(path):
        decoder = sse_decoder()
        assert decoder.receive_data(b"data: a\r\n\r\nevent: e\r\ndata: b\r\n\r") == [
            ev("a", b"data: a\r\n\r\n")
        ]
        assert exact(decoder.receive_eof()) == [
            tuple(ev("b", b"event: e\r\ndata: b\r\n\r", event="e"))
        ]
        assert (decoder.unterminated, decoder.bytes_received) == (b"", 11 + 20)
        with pytest.raises(LocalProtocolError):
            decoder.receive_eof()


@pytest.mark.parametrize("path", SSE_PATHS)
def test_a_held_block_with_invalid_utf8_raises_when_it_is_dispatched(path: str) -> None:
    with sse_paths(path):
        decoder = sse_decoder()
        assert decoder.receive_data(b"data: ok\r\n\r\ndata: \xff\r\n\r") == [
            ev("ok", b"data: ok\r\n\r\n")
        ]
        with pytest.raises(DecodingError) as info:
            decoder.receive_eof()
        assert (info.value.offset, info.value.events) == (12 + 6, [])
        with pytest.raises(LocalProtocolError):
            decoder.receive_data(b"\n")


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("body", [b"data: a\r\r", b"data: a\r\rdata: b\r\r", b"\r\rdata: a\r\r"])
def test_cr_only_blocks_are_dispatched_at_once(body: bytes, path: str) -> None:
    # A block that ends in CR CR never waits: the read that ends at its CR returns it.
    with sse_paths(path):
        events = sse_decoder().receive_data(body)
        for cut in range(1, len(body)):
            decoder = sse_decoder()
            got = decoder.receive_data(body[:cut])
            if body[:cut].endswith(b"a\r\r"):
                assert exact(got) == [tuple(ev("a", b"data: a\r\r"))]
            got += decoder.receive_data(body[cut:])
            assert exact(got) == exact(events)
            assert decoder.receive_eof() == []
    assert [event.data for event in events] == ["a", "b"][: body.count(b"data")]
    assert exact(events)[0] == tuple(ev("a", b"data: a\r\r"))


@pytest.mark.parametrize("path", SSE_PATHS)
def test_a_cr_only_block_leaves_the_lf_after_it_to_the_next_block(path: str) -> None:
    # CR CR ends the first block at once; the LF of the CR LF that follows is swallowed, so it
    # is the second block's first byte.
    with sse_paths(path):
        out = tr(sse_decoder, b"data: a\r\r\ndata: b\r\n\r\n", sse_state)
    assert exact(out.frames) == [
        tuple(ev("a", b"data: a\r\r")),
        tuple(ev("b", b"\ndata: b\r\n\r\n")),
    ]


@pytest.mark.parametrize("path", SSE_PATHS)
def test_a_blank_line_that_starts_a_block_does_not_hold(path: str) -> None:
    # The CR of "\r\n" after a complete block is a blank line by itself, with no line before
    # it in its block: it ends an empty block at once, and its LF goes to the next block.
    body = b"data: a\n\n\r\ndata: b\r\n\r\n"
    with sse_paths(path):
        out = tr(sse_decoder, body, sse_stream_state)
        decoder = sse_decoder()
        assert exact(decoder.receive_data(body[:10])) == [tuple(ev("a", b"data: a\n\n"))]
        assert decoder.receive_data(body[10:11]) == []
        assert exact(decoder.receive_data(body[11:])) == [tuple(ev("b", b"\ndata: b\r\n\r\n"))]
    assert exact(out.frames) == [
        tuple(ev("a", b"data: a\n\n")),
        tuple(ev("b", b"\ndata: b\r\n\r\n")),
    ]
    assert out.state == ("", None, b"", len(body))


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("eol", [b"\r\n", b"\n"], ids=["CRLF", "LF"])
def test_nbytes_add_up_to_the_body_under_every_chunking(eol: bytes, path: str) -> None:
    blocks = [
        b"data: 1" + eol + eol,
        b"event: e" + eol + b"data: \xe4\xbd\xa0" + eol + eol,
        b"id: 5" + eol + b"data: x" + eol + b"data: y" + eol + eol,
        b"retry: 10" + eol + b"data: " + eol + eol,
        b"data: last" + eol + eol,
    ]
    body = b"".join(blocks)
    with sse_paths(path):
        out = tr(sse_decoder, BOM + body, sse_stream_state)
    assert [event.raw for event in out.frames] == blocks
    assert [event.nbytes for event in out.frames] == [len(block) for block in blocks]
    assert sum(event.nbytes for event in out.frames) == len(body)
    assert out.state == ("5", 10, b"", 3 + len(body))


def test_a_lf_after_a_dispatching_cr_is_swallowed_only_once() -> None:
    out = tr(sse_decoder, b"data: a\r\r\n\ndata: b\n\n", sse_state)
    # CR CR: event a. The LF pairs with the second CR; the next LF is an empty line by itself.
    assert out.frames == (ev("a", b"data: a\r\r"), ev("b", b"data: b\n\n"))


def test_state_is_updated_as_blocks_complete() -> None:
    decoder = sse_decoder()
    assert decoder.receive_data(b"retry: 300\nid: 7\n\ndata: x\nretry: 5") == []
    assert (decoder.last_event_id, decoder.reconnection_time) == ("7", 300)
    assert decoder.receive_data(b"0\n\n") == [ev("x", b"data: x\nretry: 50\n\n", id="7", retry=50)]
    assert (decoder.last_event_id, decoder.reconnection_time) == ("7", 50)


# A retry value is read as browsers read it, into a 64-bit unsigned integer: one above 2**64 - 1
# (585 million years) is ignored, like any other invalid value; Python's int() of 4,301 digits
# or more would raise.
@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (str(2**64 - 1), 2**64 - 1),
        ("0" * 4400 + "25", 25),  # leading zeros do not make a number large
        (str(2**64), None),
        ("9" * 4301, None),
    ],
    ids=["2**64-1", "zeros", "2**64", "4301 digits"],
)
def test_a_retry_value_above_64_bits_is_ignored(value: str, kept: int | None, path: str) -> None:
    block = b"retry: " + value.encode() + b"\ndata: x\n\n"
    with sse_paths(path):
        out = tr(sse_decoder, b"retry: 7\n\n" + block, sse_state)
    assert exact(out.frames) == [tuple(ev("x", block, retry=kept))]
    assert out.state == ("", 7 if kept is None else kept, b"")


def test_a_huge_retry_line_cut_by_eof_is_ignored_too() -> None:
    # The complete lines of a block cut by EOF still set the reconnection time (line by line in
    # the spec): the same bound applies there.
    tail = b"retry: " + b"9" * 4301 + b"\ndata: x"
    out = tr(sse_decoder, b"retry: 7\n\n" + tail, sse_state)
    assert (out.frames, out.state) == ((), ("", 7, tail))


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
    whole = sse_decoder().receive_data(b"".join(blocks))
    one_by_one: list[ServerSentEvent] = []
    decoder = sse_decoder()
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
        out = tr(sse_decoder, body)
    assert out.error_type is DecodingError
    assert out.error_field("offset") == 17 + len(bom)
    assert out.frames == (ev("ok", b"data: ok\n\n"),)


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("bad", list(INVALID.values()), ids=list(INVALID))
def test_strict_invalid_utf8_in_a_field_name(bad: tuple[bytes, str], path: str) -> None:
    # "id: 1\n" (6) "data: ok" (8) CR LF CR LF (4) then "d" (1): 19.
    body = b"id: 1\ndata: ok\r\n\r\nd" + bad[0] + b"ata: x\ndata: y\n\n"
    with sse_paths(path):
        out = tr(sse_decoder, body)
    assert out.error_type is DecodingError
    assert out.error_field("offset") == 19
    assert exact(out.frames) == [tuple(ev("ok", b"id: 1\ndata: ok\r\n\r\n", id="1", block_id="1"))]


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("name", [b"event", b"id", b"retry", b"data", b"other"])
def test_strict_invalid_utf8_in_a_value_a_later_field_replaces_still_raises(
    name: bytes, path: str
) -> None:
    body = name + b": a\xffb\n" + name + b": 5\ndata: x\n\n"
    with sse_paths(path):
        out = tr(sse_decoder, body)
    assert (out.error_type, out.error_field("offset"), out.frames) == (
        DecodingError,
        len(name) + 3,
        (),
    )


def test_strict_invalid_utf8_in_a_comment_still_raises() -> None:
    out = tr(sse_decoder, b": caf\xe9\ndata: x\n\n")
    assert (out.error_type, out.error_field("offset"), out.frames) == (DecodingError, 5, ())


def test_err_events_hold_the_events_completed_earlier_in_the_same_call() -> None:
    decoder = sse_decoder()
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
        out = tr(lambda: sse_decoder(errors="replace"), body)
    assert out.error is None
    assert [event.data for event in out.frames] == ["a" + bad[1] + "b", "z"]
    assert [event.nbytes for event in out.frames] == [10 + len(bad[0]), 9]


def test_invalid_utf8_in_a_discarded_tail_is_not_an_error() -> None:
    # The spec discards an unterminated event at EOF without decoding it into anything.
    out = tr(sse_decoder, b"data: ok\n\ndata: \xff", sse_state)
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
        (b"data: ok\r\n\r\ndata: 01234567\r\n\r\n", 17, 12, ["ok"]),  # 14 + CR LF CR LF
        (b"data: ok\r\n\r\ndata: 0123456\r\n\r\n", 16, 12, ["ok"]),  # 17: its last LF counts
        (b"data: ok\n\n: a comment that is far too long\n\n", 20, 10, ["ok"]),
    ],
)
def test_an_event_over_the_limit_raises(
    body: bytes, limit: int, offset: int, data: list[str]
) -> None:
    out = tr(lambda: sse_decoder(max_event_size=limit), body)
    assert out.error_type is EventTooLargeError
    assert (out.error_field("limit"), out.error_field("offset")) == (limit, offset)
    assert [event.data for event in out.frames] == data


def test_an_event_of_exactly_the_limit_passes() -> None:
    out = tr(lambda: sse_decoder(max_event_size=13), b"data: 01234\n\ndata: 01234\n\n")
    assert out.error is None
    assert [event.nbytes for event in out.frames] == [13, 13]
    out = tr(lambda: sse_decoder(max_event_size=17), b"data: 0123456\r\n\r\n" * 2)
    assert out.error is None
    assert [event.nbytes for event in out.frames] == [17, 17]


# -- misuse -------------------------------------------------------------------------------------


def test_data_after_eof_is_a_local_protocol_error() -> None:
    decoder = sse_decoder()
    decoder.receive_data(b"data: x\n\n")
    assert decoder.receive_eof() == []
    with pytest.raises(LocalProtocolError, match="after the decoder eof"):
        decoder.receive_data(b"data: y\n\n")
    with pytest.raises(LocalProtocolError, match="after the decoder eof"):
        decoder.receive_data(b"")


def test_eof_twice_is_a_local_protocol_error() -> None:
    decoder = sse_decoder()
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
        sse_decoder(**kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_bytes_like_reads_decode_like_bytes() -> None:
    body = b"data: \xe4\xbd\xa0\n\ndata: x\r\n\r\n"
    expected = sse_decoder().receive_data(body)
    for read in (bytearray(body), memoryview(body)):
        assert sse_decoder().receive_data(read) == expected  # type: ignore[arg-type]
    assert [event.data for event in expected] == ["你", "x"]


def test_empty_reads_change_nothing() -> None:
    decoder = sse_decoder()
    assert decoder.receive_data(b"") == []
    assert decoder.receive_data(b"\xef") == []
    assert decoder.receive_data(b"") == []
    assert decoder.receive_data(b"\xbb\xbfdata: x\n\n") == [ev("x", b"data: x\n\n")]
    assert decoder.bytes_received == 12


def test_initial_last_event_id_is_reported_before_any_id() -> None:
    decoder = sse_decoder(last_event_id="seq-41")
    assert decoder.last_event_id == "seq-41"
    assert decoder.receive_data(b"data: x\n\n") == [ev("x", b"data: x\n\n", id="seq-41")]
