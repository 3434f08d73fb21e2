"""SSEDecoder's hot path (the accelerator) for ``event: NAME`` + ``data: VALUE`` blocks and lone
``data:`` blocks, and what it leaves alone.

Every body runs through ``tr`` (whole, byte by byte, split at every point) on every route
(``SSE_PATHS``: as shipped, without the accelerator, without it and reading in place), and the
outcome is asserted field by field, ``raw`` included (``exact``). ``general_reads`` records the
regions the field reader (the general path) read, to show which shapes the hot path takes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from tests.chunkings import (
    SSE_PATHS,
    exact,
    run,
    sse_decoder,
    sse_paths,
    sse_state,
    sse_stream_state,
    tr,
)

from unbroken import DecodingError, EventTooLargeError, ServerSentEvent, SSEDecoder


def ev(event: str, data: str, raw: bytes, id: str = "", block_id: str | None = None) -> tuple:  # type: ignore[type-arg]
    """The exact event: every field, ``raw`` included, as a plain tuple."""
    return tuple(ServerSentEvent(event, data, id, block_id, None, len(raw), raw))


@contextlib.contextmanager
def general_reads() -> Iterator[list[bytes]]:
    """The regions of complete blocks ``SSEDecoder`` hands to its field reader while the block
    runs (what the accelerator left to it)."""
    reads: list[bytes] = []
    general = SSEDecoder._blocks

    def blocks(
        self: SSEDecoder, region: bytes, size: int, at_end: bool, events: list[ServerSentEvent]
    ) -> int:
        reads.append(region[:size])
        return general(self, region, size, at_end, events)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SSEDecoder, "_blocks", blocks)
        yield reads


def whole(body: bytes, **options: object) -> tuple[list[tuple], list[bytes]]:  # type: ignore[type-arg]
    """Events of ``body`` fed in one read, and the reads the general path took."""
    with general_reads() as reads:
        decoder = sse_decoder(**options)  # type: ignore[arg-type]
        events = decoder.receive_data(body)
    return exact(events), reads


# -- the shapes the hot path takes ----------------------------------------------------------------

DELTA = (
    b'{"type":"content_block_delta","delta":{"text":"\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80"}}'
)
ANTHROPIC = (
    b"event: message_start\n"
    b'data: {"type":"message_start"}\n'
    b"\n"
    b"event: content_block_delta\n"
    b"data: " + DELTA + b"\n"
    b"\n"
    b"event: ping\n"
    b'data: {"type": "ping"}\n'
    b"\n"
)
ANTHROPIC_EVENTS = [
    ev("message_start", '{"type":"message_start"}',
       b'event: message_start\ndata: {"type":"message_start"}\n\n'),
    ev("content_block_delta", '{"type":"content_block_delta","delta":{"text":"你好 😀"}}',
       b"event: content_block_delta\ndata: " + DELTA + b"\n\n"),
    ev("ping", '{"type": "ping"}', b'event: ping\ndata: {"type": "ping"}\n\n'),
]  # fmt: skip


@pytest.mark.parametrize("path", SSE_PATHS)
def test_named_blocks_lf(path: str) -> None:
    with sse_paths(path):
        out = tr(sse_decoder, ANTHROPIC, sse_stream_state)
    assert exact(out.frames) == ANTHROPIC_EVENTS
    assert [event.nbytes for event in out.frames] == [53, 96, 36]
    assert out.error is None
    assert out.state == ("", None, b"", 185)


def test_named_blocks_lf_take_the_hot_path() -> None:
    assert whole(ANTHROPIC) == (ANTHROPIC_EVENTS, [])


CRLF = b"event: a\r\ndata: x\r\n\r\nevent: bb\r\ndata: y y\r\n\r\nevent: c\r\ndata: \r\n\r\n"
CRLF_EVENTS = [
    ev("a", "x", b"event: a\r\ndata: x\r\n\r\n"),  # the whole CR LF of the blank line
    ev("bb", "y y", b"event: bb\r\ndata: y y\r\n\r\n"),
    ev("c", "", b"event: c\r\ndata: \r\n\r\n"),
]


@pytest.mark.parametrize("path", SSE_PATHS)
def test_named_blocks_crlf(path: str) -> None:
    with sse_paths(path):
        out = tr(sse_decoder, CRLF, sse_stream_state)
    assert exact(out.frames) == CRLF_EVENTS
    assert [event.nbytes for event in out.frames] == [21, 24, 20]
    assert sum(event.nbytes for event in out.frames) == len(CRLF) == 65
    assert out.state == ("", None, b"", 65)


def test_named_blocks_crlf_take_the_hot_path() -> None:
    assert whole(CRLF) == (CRLF_EVENTS, [])
    # A read that ends at the CR of a blank line holds its block (the hot path takes only
    # blocks that end in a whole blank line, so the field reader sees it); the next read starts
    # with its LF, and dispatches it with the blocks it completes, on the hot path.
    decoder = sse_decoder()
    with general_reads() as reads:
        assert decoder.receive_data(b"event: a\r\ndata: x\r\n\r") == []
        assert reads == [b"event: a\r\ndata: x\r\n\r"]
        reads.clear()
        events = decoder.receive_data(b"\nevent: bb\r\ndata: y y\r\n\r\nevent: c\r\nda")
        assert (exact(events), reads) == (CRLF_EVENTS[:2], [])
        # A later read that ends at such a CR returns the blocks before it, and holds it.
        assert decoder.receive_data(b"ta: \r\n\r") == []
        reads.clear()
        assert exact(decoder.receive_data(b"\n")) == [CRLF_EVENTS[2]]
        assert reads == []
    assert decoder.bytes_received == 20 + 37 + 8


MIXED_LF = (
    b"data: 1\n\n"
    b"data: 2\n\n"
    b"event: e\ndata: 3\n\n"
    b"data: 4\n\n"
    b"event: f\ndata: 5\n\n"
    b"event: g\ndata: 6\n\n"
    b"data: 7\n\n"
)
MIXED_LF_EVENTS = [
    ev("message", "1", b"data: 1\n\n"),
    ev("message", "2", b"data: 2\n\n"),
    ev("e", "3", b"event: e\ndata: 3\n\n"),
    ev("message", "4", b"data: 4\n\n"),
    ev("f", "5", b"event: f\ndata: 5\n\n"),
    ev("g", "6", b"event: g\ndata: 6\n\n"),
    ev("message", "7", b"data: 7\n\n"),
]
MIXED_CRLF = MIXED_LF.replace(b"\n", b"\r\n")
MIXED_CRLF_EVENTS = [
    ev(event.event, event.data, event.raw.replace(b"\n", b"\r\n"))
    for event in (ServerSentEvent(*fields) for fields in MIXED_LF_EVENTS)
]


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize(
    ("body", "events"),
    [(MIXED_LF, MIXED_LF_EVENTS), (MIXED_CRLF, MIXED_CRLF_EVENTS)],
    ids=["LF", "CRLF"],
)
def test_named_and_lone_data_blocks_mixed(body: bytes, events: list[tuple], path: str) -> None:  # type: ignore[type-arg]
    with sse_paths(path):
        out = tr(sse_decoder, body, sse_stream_state)
    assert exact(out.frames) == events
    assert out.state == ("", None, b"", len(body))
    assert sum(event.nbytes for event in out.frames) == len(body)
    assert b"".join(event.raw for event in out.frames) == body


@pytest.mark.parametrize(
    ("body", "events"),
    [(MIXED_LF, MIXED_LF_EVENTS), (MIXED_CRLF, MIXED_CRLF_EVENTS)],
    ids=["LF", "CRLF"],
)
def test_a_region_of_one_shape_takes_the_hot_path_and_a_mix_does_not(
    body: bytes,
    events: list[tuple],  # type: ignore[type-arg]
) -> None:
    # The accelerator reads regions whose blocks all have one shape; a mix is the field reader's.
    assert whole(body) == (events, [body])
    blocks = [event[6] for event in events]
    assert whole(b"".join(blocks[:2])) == (events[:2], [])  # lone "data:" blocks
    assert whole(b"".join(blocks[4:6])) == (events[4:6], [])  # "event:" + "data:" blocks


def test_the_last_event_id_persists_into_named_blocks() -> None:
    body = b"id: 42\ndata: x\n\nevent: e\ndata: y\n\nevent: e\ndata: z\n\n"
    for path in SSE_PATHS:
        with sse_paths(path):
            out = tr(lambda: sse_decoder(last_event_id="7"), body, sse_stream_state)
        assert exact(out.frames) == [
            ev("message", "x", b"id: 42\ndata: x\n\n", id="42", block_id="42"),
            ev("e", "y", b"event: e\ndata: y\n\n", id="42"),
            ev("e", "z", b"event: e\ndata: z\n\n", id="42"),
        ]
        assert out.state == ("42", None, b"", len(body))
    # Named blocks read by the hot path carry the ID the decoder started with.
    events, reads = whole(b"event: e\ndata: y\n\n", last_event_id="7")
    assert (events, reads) == ([ev("e", "y", b"event: e\ndata: y\n\n", id="7")], [])


def test_a_name_keeps_all_but_the_first_space_and_any_other_byte() -> None:
    body = b"event:  two  spaces \ndata:  v\n\nevent: a:b\xc3\xa9\x00\ndata: :\n\n"
    expected = [
        ev(" two  spaces ", " v", b"event:  two  spaces \ndata:  v\n\n"),
        ev("a:b\xe9\x00", ":", b"event: a:b\xc3\xa9\x00\ndata: :\n\n"),
    ]
    assert whole(body) == (expected, [])
    for path in SSE_PATHS:
        with sse_paths(path):
            assert exact(tr(sse_decoder, body).frames) == expected


def test_unterminated_named_block_at_eof() -> None:
    body = b"event: a\ndata: x\n\nevent: b\ndata: y\n"
    for path in SSE_PATHS:
        with sse_paths(path):
            out = tr(sse_decoder, body, sse_stream_state)
        assert exact(out.frames) == [ev("a", "x", b"event: a\ndata: x\n\n")]
        assert out.state == ("", None, b"event: b\ndata: y\n", len(body))


# -- the shapes it leaves to the general path ---------------------------------------------------

FALLBACKS = {
    "empty name": (
        b"event: \ndata: x\n\n",
        [ev("message", "x", b"event: \ndata: x\n\n")],
    ),
    "empty name, CRLF": (
        b"event: \r\ndata: x\r\n\r\n",
        [ev("message", "x", b"event: \r\ndata: x\r\n\r\n")],
    ),
    "event: without the space": (
        b"event:e\ndata: x\n\n",
        [ev("e", "x", b"event:e\ndata: x\n\n")],
    ),
    "data: without the space": (
        b"event: e\ndata:x\n\n",
        [ev("e", "x", b"event: e\ndata:x\n\n")],
    ),
    "data then event": (
        b"data: x\nevent: e\n\n",
        [ev("e", "x", b"data: x\nevent: e\n\n")],
    ),
    "two event lines": (
        b"event: a\nevent: b\ndata: x\n\n",
        [ev("b", "x", b"event: a\nevent: b\ndata: x\n\n")],
    ),
    "two data lines": (
        b"event: e\ndata: x\ndata: y\n\n",
        [ev("e", "x\ny", b"event: e\ndata: x\ndata: y\n\n")],
    ),
    "comment": (
        b"event: e\n: keep-alive\ndata: x\n\n",
        [ev("e", "x", b"event: e\n: keep-alive\ndata: x\n\n")],
    ),
    "no data line": (
        b"event: e\n\nevent: f\ndata: y\n\n",
        [ev("f", "y", b"event: f\ndata: y\n\n")],
    ),
    "CR-only line ends": (
        b"event: e\rdata: x\r\r",
        [ev("e", "x", b"event: e\rdata: x\r\r")],
    ),
    "LF then CRLF": (
        b"event: e\ndata: x\r\n\r\n",
        [ev("e", "x", b"event: e\ndata: x\r\n\r\n")],
    ),
    "a blank line first": (
        b"\nevent: e\ndata: x\n\n",
        [ev("e", "x", b"event: e\ndata: x\n\n")],
    ),
    "CR CR after CR LF CR LF": (
        b"event: a\r\ndata: x\r\n\r\ndata: y\r\r",
        [ev("a", "x", b"event: a\r\ndata: x\r\n\r\n"), ev("message", "y", b"data: y\r\r")],
    ),
}


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("name", list(FALLBACKS))
def test_other_shapes_decode_as_the_general_path_does(name: str, path: str) -> None:
    body, expected = FALLBACKS[name]
    with sse_paths(path):
        out = tr(lambda: sse_decoder(errors="replace"), body, sse_stream_state)
    assert exact(out.frames) == expected
    assert out.error is None
    assert out.state == ("", None, b"", len(body))


def test_named_blocks_led_by_one_with_an_id_line_may_mix_with_blocks_without() -> None:
    body = b"event: e\nid: 5\ndata: y\n\nevent: f\ndata: z\n\n"
    assert whole(body) == (
        [
            ev("e", "y", b"event: e\nid: 5\ndata: y\n\n", id="5", block_id="5"),
            ev("f", "z", b"event: f\ndata: z\n\n", id="5"),
        ],
        [],
    )


@pytest.mark.parametrize("name", list(FALLBACKS))
def test_other_shapes_are_left_to_the_general_path(name: str) -> None:
    body, expected = FALLBACKS[name]
    events, reads = whole(b"event: first\ndata: ok\n\n" + body, errors="replace")
    assert events == [ev("first", "ok", b"event: first\ndata: ok\n\n"), *expected]
    assert len(reads) == 1  # the whole read, decoded once, by the general path


def test_replace_mode_named_blocks_take_the_hot_path() -> None:
    body = b"event: a\xff\ndata: b\xc0\n\n"
    expected = [ev("a\ufffd", "b\ufffd", body)]
    assert whole(body, errors="replace") == (expected, [])
    for path in SSE_PATHS:
        with sse_paths(path):
            assert exact(tr(lambda: sse_decoder(errors="replace"), body).frames) == expected


# Stream errors: the bytes received differ by chunking (input stops at the error), so these
# compare the rest of the state.


def test_invalid_utf8_in_a_name_is_the_general_paths_error() -> None:
    body = b"event: a\ndata: 1\n\nevent: b\xff\ndata: 2\n\nevent: c\ndata: 3\n\n"
    for path in SSE_PATHS:
        with sse_paths(path):
            out = tr(sse_decoder, body, sse_state)
        assert out.state == ("", None, b"")
        assert (out.error_type, out.error_field("offset")) == (DecodingError, 18 + 8)
        assert exact(out.frames) == [ev("a", "1", b"event: a\ndata: 1\n\n")]


def test_invalid_utf8_in_a_value_is_the_general_paths_error() -> None:
    body = b"event: a\ndata: 1\n\nevent: b\ndata: 2\xe4\xb8\n\ndata: 3\n\n"
    for path in SSE_PATHS:
        with sse_paths(path):
            out = tr(sse_decoder, body, sse_state)
        assert out.state == ("", None, b"")
        assert (out.error_type, out.error_field("offset")) == (DecodingError, 18 + 16)
        assert exact(out.frames) == [ev("a", "1", b"event: a\ndata: 1\n\n")]


def test_an_oversized_named_block_is_refused() -> None:
    body = b"event: a\ndata: 1\n\nevent: b\ndata: " + b"x" * 20 + b"\n\nevent: c\ndata: 3\n\n"
    for path in SSE_PATHS:
        with sse_paths(path):
            out = tr(lambda: sse_decoder(max_event_size=30), body, sse_state)
        assert out.error_type is EventTooLargeError
        assert (out.error_field("offset"), out.error_field("limit")) == (18, 30)
        assert exact(out.frames) == [ev("a", "1", b"event: a\ndata: 1\n\n")]


def test_every_route_agrees_on_a_long_stream_in_reads_of_every_size() -> None:
    body = ANTHROPIC * 3 + MIXED_LF + b"event: e\nid: 9\ndata: x\n\n" + ANTHROPIC
    outcomes = set()
    for path in SSE_PATHS:
        with sse_paths(path):
            for size in (1, 2, 7, 33, 64, 100, len(body)):
                reads = [body[i : i + size] for i in range(0, len(body), size)]
                out = run(sse_decoder, reads, sse_stream_state)
                outcomes.add((tuple(exact(out.frames)), out.error, out.state))
    assert len(outcomes) == 1
    frames, error, state = outcomes.pop()
    assert len(frames) == 9 + 7 + 1 + 3
    assert [frame[0] for frame in frames[9:17]] == ["message", "message", "e", "message",
                                                    "f", "g", "message", "e"]  # fmt: skip
    assert frames[17:] == tuple((*event[:2], "9", None, *event[4:]) for event in ANTHROPIC_EVENTS)
    assert (error, state) == (None, ("9", None, b"", len(body)))
