"""An optional accelerator for the block shapes of nearly every LLM stream.

A block is a ``data: VALUE`` line (OpenAI chat), led by an ``event: NAME`` line (Anthropic,
OpenAI Responses), an ``id: ID`` line, or both in either order (what an unbroken proxy sends);
LF or CRLF line ends. ``read_shaped`` cuts a region of complete blocks apart on their blank lines
in a few C calls and returns the events and the bytes used, or None when a block has another
shape, an empty name, an ID with U+0000 or invalid UTF-8. It changes no state, so on None the
field reader reads the same bytes; it must give exactly what the field reader gives (a property
test holds it to that).
"""

from __future__ import annotations

from collections.abc import Callable

from ._sse_fields import ServerSentEvent, new_event

__all__ = ["read_shaped"]

_CR, _LF = 0x0D, 0x0A
_DATA, _EVENT, _ID = b"data: ", b"event: ", b"id: "


def read_shaped(
    joined: bytes, end: int, lead: int, cr: bool, last_id: str, decode: Callable[[bytes], str]
) -> tuple[list[ServerSentEvent], int] | None:
    """Events of the complete blocks ``joined[:end]`` (the first after ``lead`` swallowed LFs)
    and where the blocks read end, or None.

    ``cr``: a CR was seen, so lines end in CR LF. If the last block ends at the CR of its blank
    line and nothing after it has arrived (``end`` is the length of ``joined``), it is left
    unread: the next byte decides whether it takes an LF.
    """
    eol, blank = (b"\r\n", b"\r\n\r\n") if cr else (b"\n", b"\n\n")
    # A last block without the LF after its CR is read as if it had one, then cut back.
    short = cr and joined[end - 4 : end] != blank
    if short and joined[end - 3 : end] != b"\r\n\r":
        return None
    # Every block starts with the first block's first field: the region is split on the blank
    # line and that field's name, so a piece is the block without it.
    first = next((name for name in (_DATA, _EVENT, _ID) if joined.startswith(name, lead)), None)
    if first is None:
        return None
    sep = blank + first
    extra = len(sep)
    pieces = joined[lead + extra - len(blank) : end + short - len(blank)].split(sep)
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
                    other = _ID if first is _EVENT else _EVENT
                    if not lines[1].startswith(other):
                        return None
                    if first is _EVENT:
                        ident = lines[1][4:]
                    else:
                        name = lines[1][7:]
                if name == b"" or (ident is not None and 0 in ident):
                    return None  # the field reader ignores such an ID; an empty name is its
                block_id = None if ident is None else decode(ident)
                if block_id is not None:
                    last_id = block_id
                stop = start + size + len(piece)
                event = "message" if name is None else decode(name)
                append(new_event(ServerSentEvent, (
                    event, decode(lines[-1][6:]), last_id, block_id, None, stop - start,
                    joined[start:stop],
                )))
                start, size = stop, extra
    except UnicodeDecodeError:
        return None
    if short:  # the last block is cut back: left unread if nothing follows it yet, else its LF
        last = events.pop()
        if end == len(joined):
            return events, end + 1 - last[5]
        append(new_event(ServerSentEvent, (*last[:5], last[5] - 1, last[6][:-1])))
    return events, end
