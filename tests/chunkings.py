"""Run one input through a decoder under many chunkings and insist on one outcome (h11's ``tr``).

Every decoder in unbroken has ``receive_data(bytes)`` and ``receive_eof()``. ``tr`` feeds an input
whole, one byte at a time (with an empty read between bytes), and split once at every point, and
asserts that every run gives the same ``Outcome``: the frames (those returned, then those carried on
the error's ``events``), the error (type and structured fields) and the decoder's stream-level
state. After an error it also checks that the decoder refuses further input. Tests then assert the
returned outcome against exact expected values.

Usage::

    out = tr(SSEDecoder, b"data: x\\n\\n")
    assert out.frames == (ServerSentEvent(data="x", nbytes=9, raw=b"data: x\\n\\n"),)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pytest

from unbroken.errors import LocalProtocolError, StreamError

__all__ = ["Outcome", "chunkings", "run", "sse_state", "tr"]

# The structured fields an error may carry; compared across chunkings.
_ERROR_FIELDS = ("offset", "line", "limit", "tail")


class Decoder(Protocol):
    def receive_data(self, data: bytes, /) -> Any: ...

    def receive_eof(self) -> Any: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What one run produced. ``text`` joins ``str`` results (``Utf8Decoder``)."""

    frames: tuple[Any, ...]
    text: str
    error: tuple[type[BaseException], tuple[tuple[str, Any], ...]] | None
    state: Any

    @property
    def error_type(self) -> type[BaseException] | None:
        return None if self.error is None else self.error[0]

    def error_field(self, name: str) -> Any:
        assert self.error is not None, "the run raised no error"
        return dict(self.error[1])[name]


def sse_state(decoder: Any) -> tuple[str, int | None, bytes]:
    """The stream-level state of an ``SSEDecoder`` that every chunking must agree on."""
    return (decoder.last_event_id, decoder.reconnection_time, decoder.unterminated)


def chunkings(data: bytes) -> Iterator[tuple[str, list[bytes]]]:
    """Whole; byte by byte with empty reads between; split once at every point."""
    yield "whole", [data]
    byte_reads: list[bytes] = []
    for i in range(len(data)):
        byte_reads += [data[i : i + 1], b""]
    yield "bytewise", byte_reads
    for cut in range(1, len(data)):
        yield f"split@{cut}", [data[:cut], data[cut:]]


def run(
    make: Callable[[], Decoder],
    reads: Iterable[bytes],
    state: Callable[[Any], Any] | None = None,
    *,
    eof: bool = True,
) -> Outcome:
    """Feed ``reads`` (then EOF) to a fresh decoder and record what happened."""
    decoder = make()
    frames: list[Any] = []
    texts: list[str] = []

    def take(result: Any) -> None:
        if isinstance(result, str):
            texts.append(result)
        else:
            frames.extend(result)

    error: tuple[type[BaseException], tuple[tuple[str, Any], ...]] | None = None
    try:
        for read in reads:
            take(decoder.receive_data(read))
        if eof:
            take(decoder.receive_eof())
    except StreamError as err:
        for item in err.events:  # Utf8Decoder carries the text decoded before the error
            take(item if isinstance(item, str) else [item])
        fields = tuple((name, getattr(err, name)) for name in _ERROR_FIELDS if hasattr(err, name))
        error = (type(err), fields)
        # A decoder that raised is finished: any further call is the caller's bug.
        with pytest.raises(LocalProtocolError):
            decoder.receive_data(b"data: more\n\n")
        with pytest.raises(LocalProtocolError):
            decoder.receive_eof()
    return Outcome(
        frames=tuple(frames),
        text="".join(texts),
        error=error,
        state=None if state is None else state(decoder),
    )


def tr(
    make: Callable[[], Decoder],
    data: bytes,
    state: Callable[[Any], Any] | None = None,
    *,
    eof: bool = True,
    extra: Sequence[Sequence[bytes]] = (),
) -> Outcome:
    """Run ``data`` under every chunking (plus any ``extra`` read lists); all must agree."""
    expected = run(make, [data], state, eof=eof)
    runs = list(chunkings(data))[1:]
    runs += [(f"extra#{i}", list(reads)) for i, reads in enumerate(extra)]
    for name, reads in runs:
        assert b"".join(reads) == data
        got = run(make, reads, state, eof=eof)
        assert got == expected, f"chunking {name} differs from the whole read"
    return expected
