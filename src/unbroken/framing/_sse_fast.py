"""An optional accelerator for the block shapes of nearly every LLM stream.

A block is a ``data: VALUE`` line (OpenAI chat), led by an ``event: NAME`` line (Anthropic,
OpenAI Responses), an ``id: ID`` line, or both in either order (an unbroken proxy); LF or CRLF
line ends. ``read_shaped`` splits a region of complete blocks on their blank lines in a few C
calls and returns their events, or None if a block has another shape, an empty name, an ID with
U+0000 or invalid UTF-8; then the field reader reads the same bytes (no state was changed). It
gives exactly what the field reader gives: a property test holds it to that.
"""

from __future__ import annotations

from collections.abc import Callable

from ._sse_fields import ServerSentEvent, new_event

__all__ = ["read_shaped"]

_CR, _LF = 0x0D, 0x0A
_DATA, _EVENT, _ID = b"data: ", b"event: ", b"id: "


def read_shaped(
    joined: bytes, end: int, lead: int, cr: bool, last_id: str, decode: Callable[[bytes], str]
) -> list[ServerSentEvent] | None:
    """Events of the complete blocks ``joined[:end]`` (the first after ``lead`` swallowed LFs),
    or None. ``cr``: a CR was seen, so lines end in CR LF."""
    eol, blank = (b"\r\n", b"\r\n\r\n") if cr else (b"\n", b"\n\n")
    if not joined.endswith(blank, 0, end):
        return None  # (rare: a last block held at its CR, or a CR CR block end)
    # Every block starts with the first block's first field: the region is split on the blank
    # line and that field's name, so a piece is the block without it.
    first = next((name for name in (_DATA, _EVENT, _ID) if joined.startswith(name, lead)), None)
    if first is None:
        return None
    sep = blank + first
    extra = len(sep)
    pieces = joined[lead + extra - len(blank) : end - len(blank)].split(sep)
    events: list[ServerSentEvent] = []
    append = events.append
    start = 0
    size = extra + lead  # bytes of a block besides its piece
    try:
        if first is _DATA:  # a lone data line: one check a block
            for value in pieces:
                if _LF in value or (cr and _CR in value):
                    return None
                stop = start + size + len(value)
                append(new_event(ServerSentEvent, (
                    "message", decode(value), last_id, None, None, stop - start, joined[start:stop]
                )))
                start, size = stop, extra
        else:
            for piece in pieces:
                lines = piece.split(eol)
                n = len(lines)
                if not 1 < n < 4 or not lines[-1].startswith(_DATA):
                    return None
                if cr and (piece.count(_CR) != n - 1 or piece.count(_LF) != n - 1):
                    return None  # a line that ends in a lone CR or LF
                name, ident = (lines[0], None) if first is _EVENT else (None, lines[0])
                if n == 3:  # the other one of event and id
                    if first is _EVENT and lines[1].startswith(_ID):
                        ident = lines[1][4:]
                    elif first is _ID and lines[1].startswith(_EVENT):
                        name = lines[1][7:]
                    else:
                        return None
                if name == b"" or (ident is not None and 0 in ident):
                    return None  # "message", an ignored ID: the field reader's cases
                if ident is not None:
                    last_id = decode(ident)
                stop = start + size + len(piece)
                event = "message" if name is None else decode(name)
                append(new_event(ServerSentEvent, (
                    event, decode(lines[-1][6:]), last_id, None if ident is None else last_id,
                    None, stop - start, joined[start:stop],
                )))
                start, size = stop, extra
    except UnicodeDecodeError:
        return None
    return events
