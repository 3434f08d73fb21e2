"""``nbytes`` and ``raw`` cover each block exactly, terminators included, in any reads.

Bodies are drawn with one line-ending style (CRLF, LF or CR only), every block with a data line
so that every block is an event. Whatever the reads, on every route (``SSE_PATHS``), the events
are those of the whole body read at once, field by field (``raw`` too), and their raws put
together, then the unterminated tail, are the body without its BOM: a block that ends in LF CR
takes the LF after its CR, so CRLF blocks lose no byte to the next one.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.chunkings import SSE_PATHS, exact, run, sse_decoder, sse_paths, sse_stream_state

BOM = b"\xef\xbb\xbf"
SETTINGS = settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
EOLS = {"CRLF": b"\r\n", "LF": b"\n", "CR": b"\r"}
VALUES = st.text(st.sampled_from([*"ab :{}", "\x00", "é", "你", "😀"]), max_size=8)
OTHER_LINES = st.sampled_from(
    [b"event: delta", b"event: ", b"id: 7", b"id", b"retry: 250", b": ping", b"other: x", b"data"]
)


@st.composite
def block_lines(draw: st.DrawFn) -> list[bytes]:
    """The lines of one block: at least one data line, so that it dispatches an event."""
    lines = [b"data: " + draw(VALUES).encode()]
    for _ in range(draw(st.integers(0, 3))):
        line = draw(st.one_of(OTHER_LINES, VALUES.map(lambda v: b"data:" + v.encode())))
        lines.insert(draw(st.integers(0, len(lines))), line)
    return lines


@st.composite
def body_of(draw: st.DrawFn, eol: bytes) -> tuple[bytes, list[bytes]]:
    """A body (BOM, blocks, maybe a cut last block) and the blocks that are complete in it."""
    blocks = [
        b"".join(line + eol for line in lines) + eol
        for lines in draw(st.lists(block_lines(), min_size=1, max_size=8))
    ]
    body = b"".join(blocks)
    if draw(st.booleans()):
        last = b"".join(line + eol for line in draw(block_lines())) + eol
        cut = last[: draw(st.integers(1, len(last) - 1))]
        if cut.endswith(b"\n\r"):
            blocks.append(cut)  # complete up to its CR: dispatched at EOF without an LF
        body += cut
    if draw(st.booleans()):
        body = BOM + body
    return body, blocks


def reads(body: bytes) -> st.SearchStrategy[list[bytes]]:
    def split(points: list[int]) -> list[bytes]:
        edges = [0, *sorted(points), len(body)]
        return [body[a:b] for a, b in itertools.pairwise(edges)]

    return st.lists(st.integers(0, len(body)), max_size=12).map(split)


@pytest.mark.parametrize("path", SSE_PATHS)
@pytest.mark.parametrize("style", list(EOLS))
@SETTINGS
@given(data=st.data())
def test_raws_put_together_are_the_body_in_any_reads(
    data: st.DataObject, style: str, path: str
) -> None:
    body, blocks = data.draw(body_of(EOLS[style]), label="body")
    stream = body.removeprefix(BOM)
    with sse_paths(path):
        whole = run(sse_decoder, [body], sse_stream_state)
        bytewise = run(sse_decoder, [body[i : i + 1] for i in range(len(body))], sse_stream_state)
        chunked = run(sse_decoder, data.draw(reads(body), label="reads"), sse_stream_state)
    assert whole.error is None
    for other in (bytewise, chunked):
        assert exact(other.frames) == exact(whole.frames)
        assert other.state == whole.state
    events = whole.frames
    tail = whole.state[2]
    assert [event.raw for event in events] == blocks
    assert [event.nbytes for event in events] == [len(block) for block in blocks]
    assert b"".join(event.raw for event in events) + tail == stream
    assert sum(event.nbytes for event in events) == len(stream) - len(tail)
    assert whole.state[3] == len(body)
