"""Decoder fuzzing at scale: every decoder and every dialect, on random bytes, SSE/NDJSON-shaped
noise and mutated provider bodies (the conformance fixtures with bytes flipped, inserted, cut).

- only ``StreamError`` subclasses escape a decoder (``tests.chunkings.run`` lets anything else
  through, failing the test); ``unbroken.parse`` never raises;
- the outcome (frames, error type and fields, stream state; for a dialect the whole message) is
  identical whole, split at hypothesis-chosen points, and one byte at a time;
- memory stays bounded (tracemalloc) on MiBs of hostile input (2 short, 16 long) with a 64 KiB
  event limit.

Example counts come from the profile (``PROFILE.fuzz_examples`` per test).
"""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.chunkings import run, sse_state
from tests.torture.profile import PROFILE
from tests.torture.tally import Tally

from unbroken import parse
from unbroken.dialects import DIALECT_NAMES
from unbroken.framing import NDJSONDecoder, SSEDecoder, Utf8Decoder

FIXTURES = sorted(Path(__file__).parent.parent.glob("conformance/dialects/*/*.*[se]"))
BODIES = [path.read_bytes() for path in FIXTURES if path.suffix in (".sse", ".ndjson")]
FRAGMENTS = [b"data: ", b"data:", b"event: ", b"id: ", b"retry: ", b"retry: 12", b":", b": ping",
             b"\n", b"\r", b"\r\n", b"\n\n", b"{", b"}", b'"', b"[DONE]", b'{"choices":[',
             b'"delta":{"content":"', b'"finish_reason":"stop"', b'"type":"', b"\xef\xbb\xbf",
             "é🙂你".encode(), b"\xff", b"\xc3", b"\xf0\x9f", b"\x00", b"0", b"-1", b"null",
             b'{"done":true}', b'"text":"', b"message_stop", b"response.completed"]
SETTINGS = settings(max_examples=PROFILE.fuzz_examples, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
COUNTS: dict[str, int] = {}


@st.composite
def hostile(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["random", "fragments", "mutated"]))
    if kind == "random":
        return draw(st.binary(max_size=600))
    if kind == "fragments":
        return b"".join(draw(st.lists(st.sampled_from(FRAGMENTS), max_size=60)))
    body = bytearray(draw(st.sampled_from(BODIES)))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, max(0, len(body) - 1)))
        action = draw(st.sampled_from(["flip", "insert", "delete", "cut"]))
        if action == "flip" and body:
            body[at] = draw(st.integers(0, 255))
        elif action == "insert":
            body[at:at] = draw(st.sampled_from(FRAGMENTS))
        elif action == "delete":
            del body[at:at + draw(st.integers(1, 8))]
        else:
            del body[at:]
    return bytes(body)


@st.composite
def with_splits(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    data = draw(hostile())
    cuts = sorted(set(draw(st.lists(st.integers(0, len(data)), max_size=12))))
    edges = [0, *cuts, len(data)]
    return data, [data[a:b] for a, b in itertools.pairwise(edges)]


def _bytewise(data: bytes) -> Iterator[bytes]:
    for index in range(len(data)):
        yield data[index:index + 1]


DECODERS: dict[str, tuple[Callable[[], Any], Callable[[Any], Any] | None]] = {
    "sse": (SSEDecoder, sse_state),
    "sse-replace": (lambda: SSEDecoder(errors="replace"), sse_state),
    "sse-small-limit": (lambda: SSEDecoder(max_event_size=64), sse_state),
    "ndjson": (NDJSONDecoder, None),
    "ndjson-small-limit": (lambda: NDJSONDecoder(max_event_size=64), None),
    "utf8": (Utf8Decoder, None),
}


@pytest.mark.parametrize("name", list(DECODERS))
def test_decoders_agree_under_every_chunking_and_raise_only_stream_errors(name: str) -> None:
    make, state = DECODERS[name]

    @SETTINGS
    @given(with_splits())
    def check(case: tuple[bytes, list[bytes]]) -> None:
        data, pieces = case
        whole = run(make, [data], state)
        assert run(make, pieces, state) == whole
        if len(data) <= 200:
            assert run(make, _bytewise(data), state) == whole
        COUNTS[name] = COUNTS.get(name, 0) + 1

    check()
    Tally(f"fuzz decoder {name}", inputs=COUNTS.get(name, 0)).write()


def _summary(message: Any) -> tuple[Any, ...]:
    error = message.error
    return (message.status, message.finish_reason, message.raw_finish_reason, message.text,
            message.reasoning, [(c.id, c.name, c.arguments) for c in message.tool_calls],
            message.usage, message.last_seq, message.duplicates,
            None if error is None else (type(error).__name__, str(error)))


@pytest.mark.parametrize("dialect", [*DIALECT_NAMES, "auto"])
def test_dialects_never_raise_and_agree_under_every_chunking(dialect: str) -> None:
    @SETTINGS
    @given(with_splits())
    def check(case: tuple[bytes, list[bytes]]) -> None:
        data, pieces = case
        whole = _summary(parse([data], dialect=dialect, trace=False))
        assert _summary(parse(pieces, dialect=dialect, trace=False)) == whole
        if len(data) <= 200:
            assert _summary(parse(_bytewise(data), dialect=dialect, trace=False)) == whole
        COUNTS[dialect] = COUNTS.get(dialect, 0) + 1

    check()
    Tally(f"fuzz dialect {dialect}", inputs=COUNTS.get(dialect, 0)).write()


LIMIT = 64 * 1024
HOSTILE_MIB = PROFILE.hostile_mib


def _peak(feed: Callable[[], None]) -> int:
    tracemalloc.start()
    try:
        feed()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", ["one endless line", "endless comments", "endless ids",
                                   "many tiny events"])
def test_memory_stays_bounded_on_hostile_input(shape: str) -> None:
    piece = {
        "one endless line": b"data: " + b"x" * 65530,
        "endless comments": b": keep-alive\n" * 5000,
        "endless ids": b"id: 1\n\n" * 9000,
        "many tiny events": b"data: \xe4\xbd\xa0\n\n" * 600,  # 600 events returned per read
    }[shape]
    reads = HOSTILE_MIB * 2**20 // len(piece)

    def sse() -> None:
        decoder = SSEDecoder(max_event_size=LIMIT)
        try:
            for _ in range(reads):
                decoder.receive_data(piece)  # events are dropped: a reader that keeps up
        except Exception as error:
            assert type(error).__name__ == "EventTooLargeError", error

    def ndjson() -> None:
        decoder = NDJSONDecoder(max_event_size=LIMIT)
        try:
            for _ in range(reads):
                decoder.receive_data(piece.replace(b"\n\n", b"\n"))
        except Exception as error:
            assert type(error).__name__ in ("EventTooLargeError", "PayloadError"), error

    peaks = {"sse": _peak(sse), "ndjson": _peak(ndjson)}
    Tally(f"memory bound, {shape} ({HOSTILE_MIB} MiB)", inputs=2,
          notes={"peak bytes": peaks}).write()
    # The event limit plus the read being looked at, with room for the interpreter's own.
    assert max(peaks.values()) < 4 * LIMIT + 4 * len(piece) + 256 * 1024, peaks
