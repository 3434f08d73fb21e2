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

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from unittest import mock

import pytest

import unbroken.framing.sse
import unbroken.framing.sse_blocks
from unbroken.errors import LocalProtocolError, StreamError

__all__ = [
    "SSE_PATHS",
    "Outcome",
    "chunkings",
    "exact",
    "run",
    "sse_paths",
    "sse_state",
    "sse_stream_state",
    "tr",
]

# SSEDecoder reads the same bytes by several routes, chosen by shape and size: "usual" (as
# shipped), "named first" (every read the hot paths take goes down the named-event path, which
# then reads lone "data:" blocks too), "general" (no hot path), "block by block" (no region is
# read as one list of lines) and "in place" (every block and buffer counts as huge, so the
# copy-careful routes run). A test parametrized over SSE_PATHS runs each.
SSE_PATHS = ("usual", "named first", "general", "block by block", "in place")

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


@contextlib.contextmanager
def sse_paths(path: str) -> Iterator[None]:
    """Make ``SSEDecoder`` take the routes named by ``path`` (one of ``SSE_PATHS``)."""
    assert path in SSE_PATHS
    blocks, sse = unbroken.framing.sse_blocks, unbroken.framing.sse
    with contextlib.ExitStack() as stack:
        if path == "named first":
            stack.enter_context(mock.patch.object(sse, "_DATA_LINES_FIRST", False))
        if path == "general":
            stack.enter_context(mock.patch.object(sse, "_SMALL", -1))
        if path in ("block by block", "in place"):
            stack.enter_context(mock.patch.object(blocks, "_LINES_LIMIT", 0))
        if path == "in place":
            stack.enter_context(mock.patch.object(blocks, "_COPY_LIMIT", 0))
            stack.enter_context(mock.patch.object(sse, "_SMALL", 0))
        yield


def sse_state(decoder: Any) -> tuple[str, int | None, bytes]:
    """The stream-level state of an ``SSEDecoder`` that every chunking must agree on."""
    return (decoder.last_event_id, decoder.reconnection_time, decoder.unterminated)


def sse_stream_state(decoder: Any) -> tuple[str, int | None, bytes, int]:
    """``sse_state`` and ``bytes_received``: what every route must agree on for one chunking."""
    return (*sse_state(decoder), decoder.bytes_received)


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
        # Frames that leave fields out of ``==`` (ServerSentEvent's ``raw``) must agree on them too.
        assert exact(got.frames) == exact(expected.frames), f"chunking {name}: raw bytes differ"
    return expected


def exact(frames: Sequence[Any]) -> list[Any]:
    """Frames as plain tuples, so that every field compares (``raw`` too)."""
    return [tuple(frame) if isinstance(frame, tuple) else frame for frame in frames]
