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
from typing import Any, Literal, Protocol

import pytest

from unbroken.errors import LocalProtocolError, StreamError
from unbroken.framing import DEFAULT_MAX_EVENT_SIZE, SSEDecoder

__all__ = [
    "SSE_PATHS",
    "Outcome",
    "chunkings",
    "exact",
    "run",
    "sse_decoder",
    "sse_paths",
    "sse_state",
    "sse_stream_state",
    "tr",
]

# SSEDecoder reads the same bytes by several routes, composed of its parts: "usual" (as shipped:
# the accelerator for the common block shapes, else the field reader), "general" (no accelerator)
# and "in place" (no accelerator, every block read as a huge one, its values in place). A test
# parametrized over SSE_PATHS builds its decoders with ``sse_decoder`` inside ``sse_paths(path)``.


class GeneralSSEDecoder(SSEDecoder):
    accelerator = None


class InPlaceSSEDecoder(GeneralSSEDecoder):
    copy_limit = 0


_ROUTES: dict[str, type[SSEDecoder]] = {
    "usual": SSEDecoder,
    "general": GeneralSSEDecoder,
    "in place": InPlaceSSEDecoder,
}
SSE_PATHS = tuple(_ROUTES)
_route: list[type[SSEDecoder]] = [SSEDecoder]  # the innermost ``sse_paths`` wins

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
    """Make ``sse_decoder`` build the route named by ``path`` (one of ``SSE_PATHS``)."""
    _route.append(_ROUTES[path])
    try:
        yield
    finally:
        _route.pop()


def sse_decoder(
    errors: Literal["strict", "replace"] = "strict",
    max_event_size: int = DEFAULT_MAX_EVENT_SIZE,
    last_event_id: str = "",
) -> SSEDecoder:
    """An ``SSEDecoder`` of the route chosen by ``sse_paths`` (as shipped outside one)."""
    return _route[-1](errors=errors, max_event_size=max_event_size, last_event_id=last_event_id)


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
