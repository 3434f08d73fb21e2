"""``parse``: a whole body (or a capture's reads) to a closed ``Message``, with no I/O."""

from __future__ import annotations

from collections.abc import Iterable

from .framing import DEFAULT_MAX_EVENT_SIZE
from .message import Message
from .receiver import DEFAULT_STALL_SECONDS, StreamReceiver
from .trace import DEFAULT_RAW_BUDGET

__all__ = ["parse"]


def parse(
    chunks: Iterable[bytes | tuple[float, bytes]] | bytes,
    dialect: str = "auto",
    trace: bool = True,
    *,
    max_event_size: int = DEFAULT_MAX_EVENT_SIZE,
    stall_seconds: float = DEFAULT_STALL_SECONDS,
    raw_budget: int = DEFAULT_RAW_BUDGET,
) -> Message:
    """Feed ``chunks`` (bytes, or ``(seconds, bytes)`` pairs from a capture) and EOF.

    Never raises for bad input: a decoding error, an oversized event or a malformed payload ends
    the message ``failed`` with the error in ``message.error``; what was committed before it is
    kept. Bytes after such an error are not read. (An unknown dialect name is a ``ValueError``:
    that is a mistake in the call, not in the input.)
    """
    if isinstance(chunks, bytes | bytearray | memoryview):
        chunks = [bytes(chunks)]  # one body, not an iterable of ints
    receiver = StreamReceiver(
        dialect,
        trace=trace,
        max_event_size=max_event_size,
        stall_seconds=stall_seconds,
        raw_budget=raw_budget,
    )
    t = 0.0
    for chunk in chunks:
        if isinstance(chunk, tuple):
            t, data = chunk
        else:
            data = chunk
        receiver.receive_data(data, t)
        if receiver.finished:
            return receiver.message
    receiver.receive_eof(t)
    return receiver.message
