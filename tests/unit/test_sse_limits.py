"""Bounds without clocks: the size cap, memory peaks (tracemalloc) and work (counted).

Work is counted, not timed: ``scanned`` installs a profile hook that sees every call the decoder
makes into C and adds up the length of each ``bytes``/``bytearray``/``memoryview`` it calls a
method on (a search, split, copy or decode of that object). That sum bounds the bytes those calls
can touch; a decoder that searched or copied its whole buffer again on every read would make it
grow with the square of the input. Operators (``in``, ``+=``, slicing) are not calls and are not
counted; the decoder applies them only to the new read or to one block.
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

import pytest

import unbroken.framing._sse
import unbroken.framing._sse_fast
import unbroken.framing._sse_fields
from unbroken import EventTooLargeError, LocalProtocolError, ServerSentEvent, SSEDecoder

MiB = 2**20
_SSE_SOURCES = {
    unbroken.framing._sse.__file__,
    unbroken.framing._sse_fast.__file__,
    unbroken.framing._sse_fields.__file__,
}


def scanned(decoder: SSEDecoder, reads: Iterable[bytes]) -> tuple[int, list[ServerSentEvent]]:
    """Feed ``reads``; return the bytes the decoder's C calls were made on, and the events."""
    total = 0

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal total
        if event == "c_call" and frame.f_code.co_filename in _SSE_SOURCES:
            owner = getattr(arg, "__self__", None)
            if owner.__class__ in (bytes, bytearray, memoryview):
                total += len(owner)

    events: list[ServerSentEvent] = []
    receive = decoder.receive_data
    sys.setprofile(hook)
    try:
        for read in reads:
            events += receive(read)
        events += decoder.receive_eof()
    finally:
        sys.setprofile(None)
    return total, events


def peak_of(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- the size cap -------------------------------------------------------------------------------


def test_a_100_mib_line_is_refused_at_the_cap_without_spending_100_mib() -> None:
    decoder = SSEDecoder(max_event_size=16 * MiB)
    assert decoder.receive_data(b"data: first\n\n") == [
        ServerSentEvent(data="first", nbytes=13, raw=b"data: first\n\n")
    ]
    chunk = b"x" * (64 * 1024)
    reads = 0

    def feed_100_mib() -> None:
        nonlocal reads
        with pytest.raises(EventTooLargeError) as info:
            while reads < 1600:  # 1600 reads of 64 KiB: 100 MiB, no newline
                reads += 1
                decoder.receive_data(chunk)
        assert (info.value.limit, info.value.offset, info.value.events) == (16 * MiB, 13, [])

    peak = peak_of(feed_100_mib)
    assert reads == 257  # 256 reads are exactly 16 MiB: not over the limit yet
    assert peak < 24 * MiB
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(b"\n\n")


def test_the_cap_error_carries_the_events_completed_in_the_same_read() -> None:
    decoder = SSEDecoder(max_event_size=1024)
    with pytest.raises(EventTooLargeError) as info:
        decoder.receive_data(b"data: a\n\nid: 2\ndata: b\n\n" + b"data: " + b"y" * 2000)
    assert info.value.events == [
        ServerSentEvent(data="a", nbytes=9, raw=b"data: a\n\n"),
        ServerSentEvent(data="b", id="2", block_id="2", nbytes=15, raw=b"id: 2\ndata: b\n\n"),
    ]
    assert info.value.offset == 24


# -- memory and work for big and many events ----------------------------------------------------


@pytest.mark.parametrize(
    ("head", "end"),
    [
        (b"data: ", b"\n\n"),
        (b"data: ", b"\r\n\r\n"),
        (b"event: big\nid: 1\ndata:", b"\n\n"),  # the general (any shape) path
    ],
    ids=["data line", "CRLF", "event+id+data"],
)
def test_an_8_mib_line_in_1_kib_reads_is_linear_and_bounded(head: bytes, end: bytes) -> None:
    size = 8 * MiB
    body = head + b"x" * (size - len(head) - len(end)) + end
    reads = [body[i : i + 1024] for i in range(0, len(body), 1024)]
    assert len(reads) == 8192
    result: list[tuple[int, list[ServerSentEvent]]] = []

    # The buffer (while the line grows), then the block's bytes and its decoded value: about 2x.
    # A block of several lines is split into lines once, so its huge line is also copied: 3x.
    peak = peak_of(lambda: result.append(scanned(SSEDecoder(), reads)))
    assert peak < (4 if b"\n" in head else 3) * size
    work, events = result[0]
    # With CRLF too the block takes the whole CR LF of its blank line: it is the whole body.
    raw = body
    assert events == [
        ServerSentEvent(
            event="big" if b"event" in head else "message",
            data="x" * (len(body) - len(head) - len(end)),
            id="1" if b"id" in head else "",
            block_id="1" if b"id" in head else None,
            nbytes=len(raw),
            raw=raw,
        )
    ]
    # Reads without a line end are only appended; the line's bytes are searched and copied a
    # few times (5 to 8 here), once, when it completes.
    assert work < 10 * size


def many_events(count: int) -> bytes:
    return b"".join(b"data: %d\n\n" % i for i in range(count))


def test_200_000_events_in_1_byte_reads_take_linear_work() -> None:
    body = many_events(200_000)
    reads = [body[i : i + 1] for i in range(len(body))]
    work, events = scanned(SSEDecoder(), reads)
    assert len(events) == 200_000
    assert (events[0].data, events[-1].data, events[-1].raw) == ("0", "199999", b"data: 199999\n\n")
    # 200,000 x "data: " + LF LF, and the digits of 0..199,999.
    assert sum(event.nbytes for event in events) == len(body) == 200_000 * 8 + 1_088_890
    # Each read is searched once, each event's bytes a few times once it is complete (about 2
    # per byte here); searching the consumed body, or the growing block, on every read would
    # count millions per byte.
    assert work < 3 * len(body)


def test_20_000_crlf_events_with_fields_in_1_byte_reads_take_linear_work() -> None:
    body = b"".join(b"id: %d\r\nevent: e\r\ndata: v\r\n\r\n" % i for i in range(20_000))
    reads = [body[i : i + 1] for i in range(len(body))]
    work, events = scanned(SSEDecoder(), reads)
    assert len(events) == 20_000
    assert events[-1] == ServerSentEvent(
        event="e",
        data="v",
        id="19999",
        block_id="19999",
        nbytes=11 + 10 + 9 + 2,
        raw=b"id: 19999\r\nevent: e\r\ndata: v\r\n\r\n",
    )
    assert events[-1].raw == b"id: 19999\r\nevent: e\r\ndata: v\r\n\r\n"
    assert sum(event.nbytes for event in events) == len(body)
    assert work < 12 * len(body)  # about 9 per byte: a block of several lines, line by line


@pytest.mark.parametrize("size", [1, 7])
def test_a_block_of_many_short_lines_is_not_rescanned(size: int) -> None:
    # One 800 KB block of 100,000 lines, read 1 or 7 bytes at a time (most 7-byte reads end a
    # line): a read that ends a line must not search or copy the buffered block again.
    body = b"data: x\n" * 100_000 + b"\n"
    work, events = scanned(SSEDecoder(), [body[i : i + size] for i in range(0, len(body), size)])
    assert len(events) == 1
    assert events[0].data == "\n".join(["x"] * 100_000)
    assert work < 12 * len(body)  # about 9 per byte
