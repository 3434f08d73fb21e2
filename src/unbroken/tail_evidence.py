"""Evidence about a body's end: bytes after its last complete frame.

A body that ends mid-frame leaves an unterminated tail: the SSE decoder keeps it
(``SSEDecoder.unterminated``); for NDJSON the receiver keeps what followed the last LF, because a
last line that does not parse at EOF is a cut body, not a malformed one. The tail is only ever
evidence (warnings in the trace), never a frame, which is why it lives apart from the receiver's
frame path. Sans-I/O: stdlib only, no clock.
"""

from __future__ import annotations

from .message import Message

__all__ = ["keep_last_line", "note_unterminated_tail"]


def keep_last_line(kept: list[bytes], data: bytes) -> list[bytes]:
    """The bytes after the body's last LF so far, as parts: ``kept`` updated with read ``data``."""
    cut = data.rfind(b"\n")
    if cut >= 0:
        return [data[cut + 1 :]]
    kept.append(data)
    return kept


def note_unterminated_tail(message: Message, tail: bytes, *, text: bool = True) -> None:
    """Warn about a non-empty tail, and (for a text framing) about half a UTF-8 character at
    its very end."""
    if not tail:
        return
    message.warn(
        "unterminated_tail", f"{len(tail)} bytes after the last complete frame: {tail[:80]!r}"
    )
    if not text:
        return
    try:
        tail.decode("utf-8")
    except UnicodeDecodeError as bad:
        if bad.end == len(tail) and bad.reason == "unexpected end of data":
            message.warn(
                "truncated_utf8",
                f"the body ended inside a UTF-8 character ({len(tail) - bad.start} of its "
                "bytes arrived)",
            )
