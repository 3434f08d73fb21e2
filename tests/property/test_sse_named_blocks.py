"""The accelerator's contract: it gives exactly what the field reader gives, or declines.

Streams of ``event:`` + ``data:`` blocks and lone ``data:`` blocks, either with an ``id:`` line
(first or, as an unbroken proxy writes it, after the name) and other shapes, in any reads:
SSEDecoder with its accelerator must give exactly what it gives without
(``sse_paths("general")``) for the whole body: the same events field by field (``raw`` too), the
same error and the same stream state (the last event ID and ``bytes_received`` included). And
``read_shaped`` alone, on complete blocks, returns None or the field reader's events, the last
carrying the last event ID. The shapes are drawn so that most blocks are the ones the
accelerator takes, with the near misses it must leave alone.
"""

from __future__ import annotations

import itertools
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.chunkings import Outcome, exact, run, sse_decoder, sse_paths, sse_state, sse_stream_state

from unbroken import SSEDecoder
from unbroken.framing._sse_fast import read_shaped

SETTINGS = settings(
    max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
TEXT = st.text(
    st.sampled_from([*'ab :{}"\\', "\x00", "\u2028", "\x85", "é", "你", "😀"]), max_size=10
)
NAMES = st.sampled_from(["content_block_delta", "response.output_text.delta", "e", " x", "é:"])
IDS = st.sampled_from([b"7", b"", b"a\x00"])
# IDs the accelerator takes (a proxy's ``stream_id:seq``, the empty one, UTF-8, a colon, a
# leading space that is the value's), and ones it must leave to the field reader.
GOOD_IDS = st.sampled_from([b"ub_x:12", b"", "é你:1".encode(), b" 7", b"a:b: c"])
BAD_IDS = st.sampled_from([b"a\x00", b"\x00", b"7\xff", b"\xe4\xb8"])
INVALID = st.sampled_from([b"\xff", b"\xe4\xb8", b"\xc0\x80"])
# Shapes the hot paths take (most draws), and near misses the general path must read.
TAKEN = ["named"] * 6 + ["data"] * 3
ID_TAKEN = ["id named"] * 3 + ["named id"] * 3 + ["id data"] * 3
OTHER = ["empty name", "no space", "id", "retry", "comment", "two data", "data then event",
         "two events", "no data", "blank", "cr only", "invalid", "bad id", "id no space",
         "id only", "id empty name", "id two data", "two ids", "id cr only", "named id cr only",
         "named id two data", "named id empty name", "named bad id"]  # fmt: skip


@st.composite
def block(draw: st.DrawFn, eol: bytes, kinds: list[str]) -> bytes:
    kind = draw(st.sampled_from(kinds))
    name = draw(NAMES).encode()
    value = json.dumps({"t": draw(TEXT)}, ensure_ascii=False).encode()
    lines = {
        "named": [b"event: " + name, b"data: " + value],
        "data": [b"data: " + value],
        "empty name": [b"event: ", b"data: " + value],
        "no space": [b"event:" + name, b"data: " + value],
        "id": [b"event: " + name, b"id: " + draw(IDS), b"data: " + value],
        "id named": [b"id: " + draw(GOOD_IDS), b"event: " + name, b"data: " + value],
        "named id": [b"event: " + name, b"id: " + draw(GOOD_IDS), b"data: " + value],
        "id data": [b"id: " + draw(GOOD_IDS), b"data: " + value],
        "bad id": [b"id: " + draw(BAD_IDS), b"data: " + value],
        "id no space": [b"id:" + draw(GOOD_IDS), b"data: " + value],
        "id only": [b"id: " + draw(GOOD_IDS)],
        "id empty name": [b"id: 7", b"event: ", b"data: " + value],
        "id two data": [b"id: 7", b"event: " + name, b"data: " + value, b"data: " + value],
        "two ids": [b"id: 7", b"id: " + draw(GOOD_IDS), b"data: " + value],
        "id cr only": [b"id: 7\rdata: " + value],
        "named id cr only": [b"event: " + name, b"id: 7\rdata: " + value],
        "named id two data": [b"event: " + name, b"id: 7", b"data: " + value, b"data: " + value],
        "named id empty name": [b"event: ", b"id: 7", b"data: " + value],
        "named bad id": [b"event: " + name, b"id: " + draw(BAD_IDS), b"data: " + value],
        "retry": [b"event: " + name, b"data: " + value, b"retry: 1500"],
        "comment": [b": ping", b"event: " + name, b"data: " + value],
        "two data": [b"event: " + name, b"data: " + value, b"data: " + value],
        "data then event": [b"data: " + value, b"event: " + name],
        "two events": [b"event: x", b"event: " + name, b"data: " + value],
        "no data": [b"event: " + name],
        "blank": [],
        "cr only": [b"event: " + name + b"\rdata: " + value],
        "invalid": [b"event: " + name + draw(INVALID), b"data: " + value],
    }[kind]
    if kind == "invalid" and draw(st.booleans()):
        lines = [b"event: " + name, b"data: " + value + draw(INVALID)]
    return b"".join(line + eol for line in lines) + eol


@st.composite
def stream(draw: st.DrawFn) -> bytes:
    eol = draw(st.sampled_from([b"\n", b"\n", b"\r\n"]))
    # Half the streams: hot shapes only, with IDs (a proxy's) or without.
    hot = draw(st.sampled_from([TAKEN, ID_TAKEN]))
    kinds = hot if draw(st.booleans()) else hot + OTHER
    blocks = draw(st.lists(block(eol, kinds), min_size=1, max_size=12))
    body = b"".join(blocks)
    if draw(st.booleans()):
        body += draw(block(eol, kinds))[: draw(st.integers(0, 30))]  # cut inside a block
    return body


def reads(body: bytes) -> st.SearchStrategy[list[bytes]]:
    def split(points: list[int]) -> list[bytes]:
        edges = [0, *sorted(points), len(body)]
        return [body[a:b] for a, b in itertools.pairwise(edges)]

    return st.lists(st.integers(0, len(body)), max_size=10).map(split)


def exactly(outcome: Outcome) -> tuple[object, ...]:
    return (exact(outcome.frames), outcome.error, outcome.state)


@SETTINGS
@given(data=st.data(), body=stream())
def test_any_reads_give_what_the_general_path_gives_for_the_whole_body(
    data: st.DataObject, body: bytes
) -> None:
    errors = data.draw(st.sampled_from(["strict", "replace"]), label="errors")
    limit = data.draw(st.sampled_from([16 * 2**20, 60]), label="max_event_size")
    last_id = data.draw(st.sampled_from(["", "0"]), label="last_event_id")

    def make() -> SSEDecoder:
        return sse_decoder(errors=errors, max_event_size=limit, last_event_id=last_id)  # type: ignore[arg-type]

    chunks = data.draw(reads(body), label="reads")
    with sse_paths("general"):
        general_whole = run(make, [body], sse_state)
        general_chunks = run(make, chunks, sse_stream_state)
    for path in ("usual", "in place"):
        with sse_paths(path):
            assert exactly(run(make, [body], sse_state)) == exactly(general_whole)
            # bytes_received stops at a stream error, so it is compared read for read.
            assert exactly(run(make, chunks, sse_stream_state)) == exactly(general_chunks)
            assert exactly(run(make, chunks, sse_state)) == exactly(general_whole)


@SETTINGS
@given(data=st.data(), body=stream())
def test_read_shaped_declines_or_gives_what_the_field_reader_gives(
    data: st.DataObject, body: bytes
) -> None:
    errors = data.draw(st.sampled_from(["strict", "replace"]), label="errors")
    # Its input: complete blocks, up to a block end (a CR in the body means CR LF line ends).
    cr = b"\r" in body
    end = body.rfind(b"\r\n\r\n" if cr else b"\n\n") + (4 if cr else 2)
    if end < 4:
        return
    decode = bytes.decode if errors == "strict" else lambda raw: raw.decode("utf-8", "replace")
    shaped = read_shaped(body, end, 0, cr, "7", decode)
    if shaped is None:
        return
    with sse_paths("general"):
        decoder = sse_decoder(errors=errors, last_event_id="7")  # type: ignore[arg-type]
        expected = decoder.receive_data(body[:end])
    assert exact(shaped) == exact(expected)
    assert (shaped[-1].id if shaped else "7") == decoder.last_event_id
