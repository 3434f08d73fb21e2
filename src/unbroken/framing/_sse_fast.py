"""An optional accelerator for the block shapes that make up nearly every LLM stream.

A block of one ``data: VALUE`` line (OpenAI chat deltas), or of ``event: NAME`` then ``data:
VALUE`` (Anthropic Messages, OpenAI Responses), mixed freely; or either with an ``id: ID`` line
(first, or after the name: what an unbroken proxy sends downstream); LF or CRLF line ends.
``read_shaped`` reads a region of complete blocks in a few C calls (split on the blank lines) and
returns the events and the bytes used, or None when some block has another shape, an empty
name, an ID with U+0000, or invalid UTF-8. It changes no state, so on None the field reader reads
the same bytes; it must give exactly what the field reader gives (a property test holds it to
that). The last event's ``id`` is the last event ID after the blocks it read.
"""

from __future__ import annotations

from collections.abc import Callable

from ._sse_fields import ServerSentEvent, new_event

__all__ = ["read_shaped"]

_CR, _LF = 0x0D, 0x0A


# Per line-end style (LF, CR LF): the line end, the blank line between blocks, what ends an
# event name, and what lies between two blocks of each shape.
_STYLES = (
    (b"\n", b"\n\n", b"\ndata: ", b"\n\ndata: ", b"\n\nevent: ", b"\n\nid: "),
    (b"\r\n", b"\r\n\r\n", b"\r\ndata: ", b"\r\n\r\ndata: ", b"\r\n\r\nevent: ", b"\r\n\r\nid: "),
)


def read_shaped(
    joined: bytes, end: int, lead: int, cr: bool, last_id: str, decode: Callable[[bytes], str]
) -> tuple[list[ServerSentEvent], int] | None:
    """Events of the complete blocks ``joined[:end]`` (the first after ``lead`` swallowed LFs),
    and where the blocks read end; or None if they are not all of one of the shapes.

    ``cr``: a CR was seen in the stream, so lines end in CR LF. If the blocks end at the CR of
    a blank line, the last block ends there; if nothing after it has arrived (``end`` is the
    length of ``joined``) it is left unread: the next byte decides whether it takes an LF.
    """
    eol, blank, name_end, data_sep, event_sep, _ = _STYLES[cr]
    # A last block without the LF after its CR is read as if it had one, then cut back.
    short = cr and joined[end - 4 : end] != blank
    if short and joined[end - 3 : end] != b"\r\n\r":
        return None
    # Every block starts with the same line prefix: the blocks are split apart on the blank
    # line and that prefix, so that a piece is NAME name_end VALUE, or VALUE, or ID then either.
    if joined.startswith(b"data: ", lead):
        named, sep = False, data_sep
    elif joined.startswith(b"event: ", lead):
        if joined.startswith(b"id: ", joined.find(eol, lead) + len(eol)):
            return _read_with_ids(joined, end, lead, cr, short, decode)  # the proxy's order
        named, sep = True, event_sep
    elif joined.startswith(b"id: ", lead):
        return _read_with_ids(joined, end, lead, cr, short, decode)
    else:
        return None
    extra = len(sep)
    pieces = joined[lead + extra - len(blank) : end + short - len(blank)].split(sep)
    events: list[ServerSentEvent] = []
    append = events.append
    new, cls = new_event, ServerSentEvent
    start = 0
    size = extra + lead  # bytes of a block besides its piece
    try:
        if named:
            for piece in pieces:
                name, found, value = piece.partition(name_end)
                if not name or not found or _LF in name or _LF in value:
                    return None  # another line, or a block of the other shape
                if cr and (_CR in name or _CR in value):
                    return None
                stop = start + size + len(piece)
                append(new(cls, (decode(name), decode(value), last_id, None, None, stop - start,
                                 joined[start:stop])))  # fmt: skip
                start = stop
                size = extra
        else:
            for value in pieces:
                if _LF in value or (cr and _CR in value):
                    return None
                stop = start + size + len(value)
                append(new(cls, ("message", decode(value), last_id, None, None, stop - start,
                                 joined[start:stop])))  # fmt: skip
                start = stop
                size = extra
    except UnicodeDecodeError:
        return None
    return _cut_back(events, joined, end, short)


def _read_with_ids(
    joined: bytes, end: int, lead: int, cr: bool, short: bool, decode: Callable[[bytes], str]
) -> tuple[list[ServerSentEvent], int] | None:
    """``read_shaped`` for blocks with an ``id:`` line: ``id``, ``data``; ``id``, ``event``,
    ``data``; or (as the proxy writes a named event) ``event``, ``id``, ``data``, all blocks
    led by the first block's first field. Each block sets the last event ID, so each event
    carries its own (as ``id`` and ``block_id``)."""
    eol, blank, _, _, event_sep, id_sep = _STYLES[cr]
    event_first = joined.startswith(b"event: ", lead)
    sep = event_sep if event_first else id_sep
    extra = len(sep)
    pieces = joined[lead + extra - len(blank) : end + short - len(blank)].split(sep)
    events: list[ServerSentEvent] = []
    append = events.append
    new, cls = new_event, ServerSentEvent
    start = 0
    size = extra + lead
    raw_name: bytes | None
    try:
        for piece in pieces:
            lines = piece.split(eol)
            n = len(lines)
            if event_first:
                if n != 3 or not lines[1].startswith(b"id: "):
                    return None
                raw_name, raw_id, data = lines[0], lines[1][4:], lines[2]
            elif n == 2:
                raw_id, data = lines
                raw_name = None
            elif n == 3 and lines[1].startswith(b"event: "):
                raw_id, raw_name, data = lines[0], lines[1][7:], lines[2]
            else:
                return None
            if not data.startswith(b"data: ") or 0 in raw_id or raw_name == b"":
                return None  # another field, an ID the field reader ignores, an empty name
            if cr and (piece.count(_CR) != n - 1 or piece.count(_LF) != n - 1):
                return None  # a line that ends in a lone CR or LF
            name = "message" if raw_name is None else decode(raw_name)
            ident = decode(raw_id)
            stop = start + size + len(piece)
            append(new(cls, (name, decode(data[6:]), ident, ident, None, stop - start,
                             joined[start:stop])))  # fmt: skip
            start = stop
            size = extra
    except UnicodeDecodeError:
        return None
    return _cut_back(events, joined, end, short)


def _cut_back(
    events: list[ServerSentEvent], joined: bytes, end: int, short: bool
) -> tuple[list[ServerSentEvent], int]:
    """The events and the bytes used, once a last block read as if its CR had an LF is cut
    back: left unread if nothing follows it yet, else without that LF."""
    if short:
        last = events.pop()
        if end == len(joined):
            return events, end + 1 - last[5]  # the next byte decides whether an LF is its own
        events.append(new_event(ServerSentEvent, (*last[:5], last[5] - 1, last[6][:-1])))
    return events, end
